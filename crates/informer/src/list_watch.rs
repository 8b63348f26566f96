//! The [`ListerWatcher`] seam: how a reflector lists and watches one resource, and
//! [`ListWatch`], its implementation over a [`kctrl_client::Api`].

use kctrl_client::ObjectMetaAccess;
use std::fmt;
use std::sync::Arc;

use futures::future::BoxFuture;
use futures::stream::BoxStream;
use futures::{FutureExt, StreamExt};
use k8s_openapi::{ListableResource, Metadata};
use kctrl_client::{Api, Error, ListParams, ShardedList, WatchEvent, WatchParams};
use serde::de::DeserializeOwned;

use crate::shard::ShardScope;

/// A stream of typed watch events.
pub type EventStream<K> = BoxStream<'static, Result<WatchEvent<K>, Error>>;

/// Lists and watches one resource (client-go's `ListerWatcher`). Implemented over
/// [`kctrl_client::Api`] by [`ListWatch`] and by scripted fakes in tests.
pub trait ListerWatcher<K: k8s_openapi::ListableResource>: Send + Sync + 'static {
    /// One list call (a page when `params.limit` is set).
    fn list(&self, params: &ListParams) -> BoxFuture<'_, Result<k8s_openapi::List<K>, Error>>;

    /// Opens a watch.
    fn watch(&self, params: &WatchParams) -> BoxFuture<'_, Result<EventStream<K>, Error>>;

    /// One list call, with the answer's `metadata.shardInfo`, which says whether the server
    /// applied `params.shard_selector`. The default calls [`list`](Self::list) and reads it
    /// from the list's metadata (k8s-openapi's types have it from Kubernetes 1.36 on).
    fn list_sharded(&self, params: &ListParams) -> BoxFuture<'_, Result<ShardedList<K>, Error>>
    where
        K: 'static,
    {
        let list = self.list(params);
        async move { Ok(ShardedList::from_list(list.await?)) }.boxed()
    }

    /// The shard scope the reflector over this lister-watcher follows, if any (see
    /// [`ShardScope`]); the reflector then sets the shard selector of every call itself.
    fn shard_scope(&self) -> Option<ShardScope> {
        None
    }
}

/// A function that adjusts the parameters of every list and watch call
/// (client-go's `optionsModifier` of `NewFilteredListWatchFromClient`).
///
/// Watch calls are adjusted through a [`ListParams`] view carrying the fields a watch shares
/// with a list (selectors, resourceVersion and its match, timeout); `limit` and `continue`
/// set by the function are ignored for watches.
pub type TweakParams = Arc<dyn Fn(&mut ListParams) + Send + Sync>;

/// Lists and watches a resource through an [`Api`], optionally filtered by label and field
/// selectors (client-go's `NewFilteredListWatchFromClient`).
///
/// ```no_run
/// # fn demo(client: kctrl_client::Client) {
/// use k8s_openapi::api::core::v1::Pod;
/// use kctrl_client::Api;
/// use kctrl_informer::ListWatch;
///
/// let lw = ListWatch::new(Api::<Pod>::namespaced(client, "default"))
///     .labels("app=web")
///     .fields("status.phase=Running")
///     .tweak(|p| p.timeout_seconds = Some(60));
/// # let _ = lw;
/// # }
/// ```
pub struct ListWatch<K> {
    api: Api<K>,
    label_selector: Option<String>,
    field_selector: Option<String>,
    tweak: Option<TweakParams>,
    shard: Option<ShardScope>,
}

impl<K> Clone for ListWatch<K> {
    fn clone(&self) -> Self {
        Self {
            api: self.api.clone(),
            label_selector: self.label_selector.clone(),
            field_selector: self.field_selector.clone(),
            tweak: self.tweak.clone(),
            shard: self.shard.clone(),
        }
    }
}

impl<K> fmt::Debug for ListWatch<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ListWatch")
            .field("api", &self.api)
            .field("label_selector", &self.label_selector)
            .field("field_selector", &self.field_selector)
            .field("tweak", &self.tweak.as_ref().map(|_| "<fn>"))
            .field("shard", &self.shard)
            .finish()
    }
}

impl<K> ListWatch<K> {
    /// Lists and watches every object the handle addresses (its namespace, or all).
    pub fn new(api: Api<K>) -> Self {
        Self {
            api,
            label_selector: None,
            field_selector: None,
            tweak: None,
            shard: None,
        }
    }

    /// Only the objects `scope` selects, following it when it changes: a reflector (or
    /// informer) over this lister-watcher lists and watches with the scope's shard selector
    /// (see [`ShardScope`] for what happens on a change, and without the
    /// `ShardedListAndWatch` feature gate on the server).
    pub fn shard(mut self, scope: ShardScope) -> Self {
        self.shard = Some(scope);
        self
    }

    /// Only objects matching this label selector, e.g. `app=web,tier!=db`.
    pub fn labels(mut self, selector: impl Into<String>) -> Self {
        self.label_selector = Some(selector.into()).filter(|s: &String| !s.is_empty());
        self
    }

    /// Only objects matching this field selector, e.g. `metadata.name=web`.
    pub fn fields(mut self, selector: impl Into<String>) -> Self {
        self.field_selector = Some(selector.into()).filter(|s: &String| !s.is_empty());
        self
    }

    /// Adjusts the parameters of every list and watch call, after the selectors are set.
    pub fn tweak(mut self, f: impl Fn(&mut ListParams) + Send + Sync + 'static) -> Self {
        self.tweak = Some(Arc::new(f));
        self
    }

    /// The handle calls go through.
    pub fn api(&self) -> &Api<K> {
        &self.api
    }

    /// The list parameters actually sent for `params`.
    pub fn list_params(&self, params: &ListParams) -> ListParams {
        let mut p = params.clone();
        if self.label_selector.is_some() {
            p.label_selector.clone_from(&self.label_selector);
        }
        if self.field_selector.is_some() {
            p.field_selector.clone_from(&self.field_selector);
        }
        if let Some(tweak) = &self.tweak {
            tweak(&mut p);
        }
        p
    }

    /// The watch parameters actually sent for `params`.
    pub fn watch_params(&self, params: &WatchParams) -> WatchParams {
        let view = self.list_params(&ListParams {
            label_selector: params.label_selector.clone(),
            field_selector: params.field_selector.clone(),
            resource_version: params.resource_version.clone(),
            resource_version_match: params.resource_version_match,
            timeout_seconds: params.timeout_seconds,
            shard_selector: params.shard_selector.clone(),
            ..ListParams::default()
        });
        WatchParams {
            label_selector: view.label_selector,
            field_selector: view.field_selector,
            resource_version: view.resource_version,
            resource_version_match: view.resource_version_match,
            timeout_seconds: view.timeout_seconds,
            shard_selector: view.shard_selector,
            ..params.clone()
        }
    }
}

impl<K> ListerWatcher<K> for ListWatch<K>
where
    K: ListableResource + Metadata<Ty: ObjectMetaAccess> + DeserializeOwned + Send + Sync + 'static,
    K::Scope: 'static,
{
    fn list(&self, params: &ListParams) -> BoxFuture<'_, Result<k8s_openapi::List<K>, Error>> {
        let params = self.list_params(params);
        async move { self.api.list(&params).await }.boxed()
    }

    fn watch(&self, params: &WatchParams) -> BoxFuture<'_, Result<EventStream<K>, Error>> {
        let params = self.watch_params(params);
        async move { Ok(self.api.watch(&params).await?.boxed()) }.boxed()
    }

    fn list_sharded(&self, params: &ListParams) -> BoxFuture<'_, Result<ShardedList<K>, Error>> {
        let params = self.list_params(params);
        async move { self.api.list_sharded(&params).await }.boxed()
    }

    fn shard_scope(&self) -> Option<ShardScope> {
        self.shard.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::Pod;
    use kctrl_client::{ApiRequest, Backend, Client, ResourceVersionMatch, WatchFrames};

    struct NoBackend;

    impl Backend for NoBackend {
        fn call(&self, _: ApiRequest) -> BoxFuture<'_, Result<bytes::Bytes, Error>> {
            unreachable!()
        }
        fn watch(&self, _: ApiRequest) -> BoxFuture<'_, Result<WatchFrames, Error>> {
            unreachable!()
        }
        fn server_version(
            &self,
        ) -> BoxFuture<'_, Result<k8s_openapi::apimachinery::pkg::version::Info, Error>> {
            unreachable!()
        }
        fn api_resources<'a>(
            &'a self,
            _: &'a str,
        ) -> BoxFuture<
            'a,
            Result<k8s_openapi::apimachinery::pkg::apis::meta::v1::APIResourceList, Error>,
        > {
            unreachable!()
        }
    }

    #[test]
    fn selectors_and_tweak_apply_to_list_and_watch() {
        let api: Api<Pod> = Api::all(Client::new(NoBackend, "default"));
        let lw = ListWatch::new(api)
            .labels("app=web")
            .fields("spec.nodeName=n1")
            .tweak(|p| {
                p.timeout_seconds = Some(7);
                p.limit = Some(3);
            });
        let l = lw.list_params(&ListParams {
            resource_version: Some("0".into()),
            ..Default::default()
        });
        assert_eq!(l.label_selector.as_deref(), Some("app=web"));
        assert_eq!(l.field_selector.as_deref(), Some("spec.nodeName=n1"));
        assert_eq!(l.resource_version.as_deref(), Some("0"));
        assert_eq!((l.timeout_seconds, l.limit), (Some(7), Some(3)));

        let w = lw.watch_params(&WatchParams {
            resource_version: Some("5".into()),
            resource_version_match: Some(ResourceVersionMatch::NotOlderThan),
            send_initial_events: true,
            timeout_seconds: Some(300),
            ..Default::default()
        });
        assert_eq!(w.label_selector.as_deref(), Some("app=web"));
        assert_eq!(w.field_selector.as_deref(), Some("spec.nodeName=n1"));
        assert_eq!(w.resource_version.as_deref(), Some("5"));
        assert_eq!(
            w.resource_version_match,
            Some(ResourceVersionMatch::NotOlderThan)
        );
        assert!(w.send_initial_events && w.allow_watch_bookmarks);
        assert_eq!(w.timeout_seconds, Some(7));
    }
}

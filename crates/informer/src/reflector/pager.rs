//! Paged lists (client-go's `tools/pager` as the reflector uses it): follow continue tokens,
//! and when a continuation expires, fall back to one full list at the original
//! resourceVersion (`FullListIfExpired`).

use std::sync::Arc;

use k8s_openapi::{ListableResource, Metadata};
use kctrl_client::{Error, ListParams, ObjectMetaAccess, ShardSelector};

use crate::keys::ObjectKey;
use crate::list_watch::ListerWatcher;

/// Page size when none is configured (client-go's `pager.defaultPageSize`).
pub(crate) const DEFAULT_PAGE_SIZE: u32 = 500;

/// A whole list gathered from one or more pages.
pub(crate) struct Listed<K> {
    /// The list's resourceVersion (from its first page).
    pub(crate) resource_version: String,
    /// Every item, as the reflector admitted it.
    pub(crate) items: Vec<Arc<K>>,
    /// Whether the server split the answer into pages.
    pub(crate) paginated: bool,
    /// The keys of the items `admit` refused (the transform panicked on them).
    pub(crate) skipped: Vec<ObjectKey>,
    /// With a shard selector: whether the server applied it (its first answer carried
    /// `metadata.shardInfo`). `None` without a selector.
    pub(crate) server_filtered: Option<bool>,
}

/// Lists at `resource_version` (`""` = consistent read) in pages of `page_size` (0 = one
/// unpaged request), only the objects `shard` selects (sent to the server, and checked on
/// every item received, so a server that ignores the selector changes nothing but the
/// traffic). `admit` (transform and move into an `Arc`; `Err(key)` skips the item,
/// whose key is reported in [`Listed::skipped`]) is
/// applied to each page's items as it arrives, so only admitted items are accumulated and
/// each page is freed as soon as it is taken apart.
pub(crate) async fn list_all<K>(
    lw: &dyn ListerWatcher<K>,
    resource_version: &str,
    page_size: u32,
    shard: Option<&ShardSelector>,
    admit: &(dyn Fn(K) -> Result<Arc<K>, ObjectKey> + Sync),
) -> Result<Listed<K>, Error>
where
    K: ListableResource + Metadata<Ty: ObjectMetaAccess> + 'static,
{
    let transform_all = |items: Vec<K>, skipped: &mut Vec<ObjectKey>| -> Vec<Arc<K>> {
        items
            .into_iter()
            .filter(|o| shard.is_none_or(|s| s.matches(o.metadata())))
            .filter_map(|o| admit(o).map_err(|key| skipped.push(key)).ok())
            .collect()
    };
    let original_rv = (!resource_version.is_empty()).then(|| resource_version.to_owned());
    let mut params = ListParams {
        resource_version: original_rv.clone(),
        limit: (page_size > 0).then_some(page_size),
        shard_selector: shard.cloned(),
        ..ListParams::default()
    };
    let list = |params: &ListParams| {
        let call = lw.list_sharded(params);
        async move {
            let page = call.await?;
            let filtered = shard.map(|_| page.server_filtered());
            Ok::<_, Error>((page.list, filtered))
        }
    };
    let mut listed: Option<Listed<K>> = None;
    loop {
        let (page, server_filtered) = match list(&params).await {
            Ok(page) => page,
            Err(e) if params.continue_token.is_some() && is_resource_expired(&e) => {
                // The continuation expired: list everything at once at the original RV.
                let (full, server_filtered) = list(&ListParams {
                    resource_version: original_rv,
                    shard_selector: shard.cloned(),
                    ..ListParams::default()
                })
                .await?;
                let mut skipped = Vec::new();
                return Ok(Listed {
                    resource_version: full.metadata.resource_version.unwrap_or_default(),
                    items: transform_all(full.items, &mut skipped),
                    paginated: listed.is_some_and(|l| l.paginated),
                    skipped,
                    server_filtered,
                });
            }
            Err(e) => return Err(e),
        };
        let next = page.metadata.continue_.filter(|c| !c.is_empty());
        match &mut listed {
            None => {
                let mut skipped = Vec::new();
                listed = Some(Listed {
                    resource_version: page.metadata.resource_version.unwrap_or_default(),
                    items: transform_all(page.items, &mut skipped),
                    paginated: false,
                    skipped,
                    server_filtered,
                });
            }
            Some(l) => {
                let items = transform_all(page.items, &mut l.skipped);
                l.items.extend(items);
            }
        }
        let Some(token) = next else {
            return Ok(listed.expect("set above"));
        };
        if let Some(l) = &mut listed {
            l.paginated = true;
        }
        params.continue_token = Some(token);
        params.resource_version = None;
        params.resource_version_match = None;
    }
}

/// Reason `Expired` (apimachinery's `IsResourceExpired`; a bare 410 counts too).
fn is_resource_expired(err: &Error) -> bool {
    err.is_gone()
}

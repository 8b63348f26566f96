//! Orders of ReplicaSets the controller relies on, all sorting **in place** (later steps observe
//! the new order, as upstream's `sort.Sort` callers do).
//!
//! Every order is total (ties end at the name), so the result does not depend on the input order
//! and Rust's sort never sees an inconsistent comparator.
//!
//! Upstream: `ReplicaSetsByCreationTimestamp`, `ReplicaSetsBySizeOlder`, `ReplicaSetsBySizeNewer`
//! (controller_utils.go) and `ReplicaSetsByRevision` (deployment_util.go).

use std::borrow::Borrow;
use std::cmp::{Ordering, Reverse};

use k8s_openapi::api::apps::v1::ReplicaSet;

use super::annotations::revision;
use super::fields::rs_replicas;

/// Oldest first: creation timestamp ascending (missing = oldest, like Go's zero time), then name.
pub fn by_creation_timestamp(a: &ReplicaSet, b: &ReplicaSet) -> Ordering {
    a.metadata
        .creation_timestamp
        .cmp(&b.metadata.creation_timestamp)
        .then_with(|| name(a).cmp(name(b)))
}

fn name(rs: &ReplicaSet) -> &str {
    rs.metadata.name.as_deref().unwrap_or("")
}

/// Sorts oldest first ([`by_creation_timestamp`]).
pub fn sort_by_creation_timestamp<R: Borrow<ReplicaSet>>(rss: &mut [R]) {
    rss.sort_by(|a, b| by_creation_timestamp(a.borrow(), b.borrow()));
}

/// Sorts newest first (`sort.Reverse(ReplicaSetsByCreationTimestamp)`).
pub fn sort_by_creation_timestamp_newest_first<R: Borrow<ReplicaSet>>(rss: &mut [R]) {
    rss.sort_by(|a, b| by_creation_timestamp(b.borrow(), a.borrow()));
}

/// Sorts largest first, ties oldest first (`ReplicaSetsBySizeOlder`).
pub fn sort_by_size_older<R: Borrow<ReplicaSet>>(rss: &mut [R]) {
    rss.sort_by(|a, b| {
        let (a, b) = (a.borrow(), b.borrow());
        rs_replicas(b)
            .cmp(&rs_replicas(a))
            .then_with(|| by_creation_timestamp(a, b))
    });
}

/// Sorts largest first, ties newest first (`ReplicaSetsBySizeNewer`).
pub fn sort_by_size_newer<R: Borrow<ReplicaSet>>(rss: &mut [R]) {
    rss.sort_by(|a, b| {
        let (a, b) = (a.borrow(), b.borrow());
        rs_replicas(b)
            .cmp(&rs_replicas(a))
            .then_with(|| by_creation_timestamp(b, a))
    });
}

/// Sorts by revision ascending, ties oldest first (`ReplicaSetsByRevision`).
///
/// Upstream falls back to creation order for a *pair* when either revision is unparsable, which
/// is not a consistent order when such ReplicaSets are mixed with valid ones. Here they sort
/// before every valid revision (oldest first among themselves): the same answer whenever
/// upstream's is well-defined, and the garbage goes first when old ReplicaSets are cleaned up.
pub fn sort_by_revision<R: Borrow<ReplicaSet>>(rss: &mut [R]) {
    rss.sort_by_cached_key(|rs| {
        let rs = rs.borrow();
        let rev = revision(rs).ok();
        (
            rev.is_some(),
            rev.unwrap_or(0),
            rs.metadata.creation_timestamp.clone(),
            name(rs).to_owned(),
        )
    });
}

/// Sorts newest first by revision (the reverse of [`sort_by_revision`]).
pub fn sort_by_revision_newest_first<R: Borrow<ReplicaSet>>(rss: &mut [R]) {
    rss.sort_by_cached_key(|rs| {
        let rs = rs.borrow();
        let rev = revision(rs).ok();
        Reverse((
            rev.is_some(),
            rev.unwrap_or(0),
            rs.metadata.creation_timestamp.clone(),
            name(rs).to_owned(),
        ))
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::util::constants::REVISION_ANNOTATION;
    use crate::util::testing::map;
    use k8s_openapi::api::apps::v1::ReplicaSetSpec;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
    use k8s_openapi::jiff::Timestamp;

    fn rs(name: &str, created: i64, replicas: i32, revision: Option<&str>) -> ReplicaSet {
        ReplicaSet {
            metadata: ObjectMeta {
                name: Some(name.into()),
                creation_timestamp: Some(Time(Timestamp::from_second(created).unwrap())),
                annotations: revision.map(|r| map(&[(REVISION_ANNOTATION, r)])),
                ..Default::default()
            },
            spec: ReplicaSetSpec {
                replicas: Some(replicas),
                ..Default::default()
            },
            status: None,
        }
    }

    fn names(rss: &[ReplicaSet]) -> Vec<&str> {
        rss.iter().map(name).collect()
    }

    #[test]
    fn creation_timestamp_then_name() {
        let mut rss = vec![
            rs("b", 10, 0, None),
            rs("c", 5, 0, None),
            rs("a", 10, 0, None),
        ];
        sort_by_creation_timestamp(&mut rss);
        assert_eq!(names(&rss), ["c", "a", "b"]);
        sort_by_creation_timestamp_newest_first(&mut rss);
        assert_eq!(names(&rss), ["b", "a", "c"]);
    }

    #[test]
    fn size_orders() {
        let mut rss = vec![
            rs("old-small", 1, 1, None),
            rs("new-big", 3, 5, None),
            rs("old-big", 2, 5, None),
        ];
        sort_by_size_older(&mut rss);
        assert_eq!(names(&rss), ["old-big", "new-big", "old-small"]);
        sort_by_size_newer(&mut rss);
        assert_eq!(names(&rss), ["new-big", "old-big", "old-small"]);
    }

    #[test]
    fn revision_order_with_garbage_first() {
        let mut rss = vec![
            rs("r10", 1, 0, Some("10")),
            rs("r2", 9, 0, Some("2")),
            rs("bad", 5, 0, Some("x")),
            rs("r2-older", 3, 0, Some("2")),
            rs("none", 7, 0, None),
        ];
        sort_by_revision(&mut rss);
        // A missing annotation is revision 0 (valid), an unparsable one sorts first.
        assert_eq!(names(&rss), ["bad", "none", "r2-older", "r2", "r10"]);
        sort_by_revision_newest_first(&mut rss);
        assert_eq!(names(&rss), ["r10", "r2", "r2-older", "none", "bad"]);
    }

    #[test]
    fn works_on_shared_and_borrowed_replica_sets() {
        use std::sync::Arc;
        let (a, b) = (rs("a", 2, 0, None), rs("b", 1, 0, None));
        let mut arcs = vec![Arc::new(a.clone()), Arc::new(b.clone())];
        sort_by_creation_timestamp(&mut arcs);
        assert_eq!(arcs[0].metadata.name.as_deref(), Some("b"));
        let mut refs = vec![&a, &b];
        sort_by_creation_timestamp(&mut refs);
        assert_eq!(refs[0].metadata.name.as_deref(), Some("b"));
    }
}

//! Finding a Deployment's new and old ReplicaSets, the active ones, and the Deployments that may
//! own a ReplicaSet.
//!
//! The *new* ReplicaSet is the one whose pod template equals the Deployment's (ignoring the
//! `pod-template-hash` label); if several do (issue #40415, after upgrades), the oldest wins,
//! deterministically. Every other ReplicaSet is *old*. The finders sort their input in place,
//! oldest first, as upstream's do.
//!
//! Lists are slices of anything that borrows a ReplicaSet — `Arc<ReplicaSet>` from a lister,
//! `&ReplicaSet`, or owned values — and results are clones of the elements (cheap for `Arc`).
//!
//! Upstream: `FindNewReplicaSet`, `FindOldReplicaSets`, `FindActiveOrLatest`,
//! `SetFromReplicaSetTemplate`, `GetDeploymentsForReplicaSet`, the ownership filters of
//! `ListReplicaSets`/`ListPods` (deployment_util.go) and `FilterActiveReplicaSets`
//! (controller_utils.go).

use std::borrow::Borrow;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use k8s_openapi::api::core::v1::{Pod, PodTemplateSpec};
use kctrl_client::labels::Selector;
use kctrl_client::versioned::Versioned;

use super::constants::DEFAULT_DEPLOYMENT_UNIQUE_LABEL_KEY;
use super::equality::equal_ignore_hash;
use super::fields::rs_replicas;
use super::sort::{sort_by_creation_timestamp, sort_by_creation_timestamp_newest_first};

/// No Deployment can own the ReplicaSet.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum NoDeploymentsError {
    /// A ReplicaSet without labels matches no selector.
    #[error("no deployments found for ReplicaSet {name} because it has no labels")]
    NoLabels {
        /// The ReplicaSet's name.
        name: String,
    },
    /// No Deployment in the namespace selects the ReplicaSet's labels.
    #[error(
        "could not find deployments set for ReplicaSet {name} in namespace {namespace} with labels: {}",
        GoMap(labels)
    )]
    NotFound {
        /// The ReplicaSet's name.
        name: String,
        /// The ReplicaSet's namespace.
        namespace: String,
        /// The ReplicaSet's labels.
        labels: BTreeMap<String, String>,
    },
}

/// Formats a map as Go's `%v` does: `map[k1:v1 k2:v2]`, keys sorted.
struct GoMap<'a>(&'a BTreeMap<String, String>);

impl fmt::Display for GoMap<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("map[")?;
        for (i, (k, v)) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(" ")?;
            }
            write!(f, "{k}:{v}")?;
        }
        f.write_str("]")
    }
}

/// `FindNewReplicaSet`: sorts `rss` oldest first **in place** and returns the first whose
/// template equals the Deployment's ignoring the hash label.
pub fn find_new_replica_set<R: Borrow<ReplicaSet> + Clone>(
    d: &Deployment,
    rss: &mut [R],
) -> Option<R> {
    sort_by_creation_timestamp(rss);
    // Compared in place: an absent template reads as the empty one.
    let empty = PodTemplateSpec::default();
    let template = d.spec.get().map_or(&empty, |s| &s.template);
    rss.iter()
        .find(|rs| {
            let rs_template = (*rs)
                .borrow()
                .spec
                .get()
                .and_then(|s| s.template.as_ref())
                .unwrap_or(&empty);
            equal_ignore_hash(rs_template, template)
        })
        .cloned()
}

/// `FindOldReplicaSets` → `(required, all)`: every ReplicaSet but the new one (`all`), and those
/// of them that still have replicas (`required`). Sorts `rss` in place, like
/// [`find_new_replica_set`].
pub fn find_old_replica_sets<R: Borrow<ReplicaSet> + Clone>(
    d: &Deployment,
    rss: &mut [R],
) -> (Vec<R>, Vec<R>) {
    let new_uid = find_new_replica_set(d, rss).map(|rs| rs.borrow().metadata.uid.clone());
    let mut required = Vec::new();
    let mut all = Vec::new();
    for rs in rss.iter() {
        if let Some(uid) = &new_uid
            && rs.borrow().metadata.uid == *uid
        {
            continue;
        }
        all.push(rs.clone());
        if rs_replicas(rs.borrow()) != 0 {
            required.push(rs.clone());
        }
    }
    (required, all)
}

/// `FilterActiveReplicaSets`: the ReplicaSets that want pods (`spec.replicas > 0`).
pub fn filter_active_replica_sets<R: Borrow<ReplicaSet> + Clone>(rss: &[R]) -> Vec<R> {
    rss.iter()
        .filter(|rs| rs_replicas((*rs).borrow()) > 0)
        .cloned()
        .collect()
}

/// `FindActiveOrLatest`: the only active ReplicaSet, or — with none active — the new one, else
/// the newest old one; `None` when several are active (they must be scaled proportionally).
/// Sorts `old_rss` newest first **in place**.
pub fn find_active_or_latest<R: Borrow<ReplicaSet> + Clone>(
    new_rs: Option<&R>,
    old_rss: &mut [R],
) -> Option<R> {
    if new_rs.is_none() && old_rss.is_empty() {
        return None;
    }
    sort_by_creation_timestamp_newest_first(old_rss);
    let mut all: Vec<R> = old_rss.to_vec();
    all.extend(new_rs.cloned());
    let mut active = filter_active_replica_sets(&all);
    match active.len() {
        0 => new_rs.cloned().or_else(|| old_rss.first().cloned()),
        1 => active.pop(),
        _ => None,
    }
}

/// `SetFromReplicaSetTemplate`: on rollback, the Deployment's template becomes the ReplicaSet's,
/// without the `pod-template-hash` label.
pub fn set_from_replica_set_template(d: &mut Deployment, mut template: PodTemplateSpec) {
    if let Some(labels) = template.metadata.as_mut().and_then(|m| m.labels.as_mut()) {
        labels.remove(DEFAULT_DEPLOYMENT_UNIQUE_LABEL_KEY);
    }
    d.spec.get_mut().template = template;
}

/// `GetDeploymentsForReplicaSet`: the Deployments (from `deployments`, e.g. a lister's contents)
/// in the ReplicaSet's namespace whose valid, non-empty selector matches its labels. Only the one
/// named by the ReplicaSet's controller reference actually manages it.
pub fn get_deployments_for_replica_set<D: Borrow<Deployment> + Clone>(
    deployments: &[D],
    rs: &ReplicaSet,
) -> Result<Vec<D>, NoDeploymentsError> {
    let labels = rs.metadata.labels.clone().unwrap_or_default();
    if labels.is_empty() {
        return Err(NoDeploymentsError::NoLabels {
            name: rs.metadata.name.clone().unwrap_or_default(),
        });
    }
    let namespace = rs.metadata.namespace.as_deref().unwrap_or("");
    let found: Vec<D> = deployments
        .iter()
        .filter(|d| {
            let d: &Deployment = (*d).borrow();
            if d.metadata.namespace.as_deref().unwrap_or("") != namespace {
                return false;
            }
            let Some(spec) = d.spec.get() else {
                return false;
            };
            // An invalid selector matches nothing; an empty one must match nothing either.
            match Selector::from_label_selector(&spec.selector) {
                Ok(selector) => !selector.is_everything() && selector.matches(&labels),
                Err(_) => false,
            }
        })
        .cloned()
        .collect();
    if found.is_empty() {
        return Err(NoDeploymentsError::NotFound {
            name: rs.metadata.name.clone().unwrap_or_default(),
            namespace: namespace.to_owned(),
            labels,
        });
    }
    Ok(found)
}

pub use kctrl_controller_ref::{get_controller_of, is_controlled_by};

/// The ownership filter of `ListReplicaSets`: the ReplicaSets (already selected by the
/// Deployment's selector) whose controller is the Deployment.
pub fn filter_owned_replica_sets<R: Borrow<ReplicaSet> + Clone>(
    d: &Deployment,
    rss: &[R],
) -> Vec<R> {
    rss.iter()
        .filter(|rs| is_controlled_by(&(*rs).borrow().metadata, &d.metadata))
        .cloned()
        .collect()
}

/// The ownership filter of `ListPods`: the pods whose controller is one of `rss`.
pub fn filter_pods_owned_by<R: Borrow<ReplicaSet>, P: Borrow<Pod> + Clone>(
    rss: &[R],
    pods: &[P],
) -> Vec<P> {
    let uids: BTreeSet<&str> = rss
        .iter()
        .filter_map(|rs| rs.borrow().metadata.uid.as_deref())
        .collect();
    pods.iter()
        .filter(|p| {
            get_controller_of(&(*p).borrow().metadata)
                .is_some_and(|r| uids.contains(r.uid.as_str()))
        })
        .cloned()
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::util::testing::{
        generate_deployment, generate_rs, map, set_rs_label, set_rs_replicas,
    };
    use k8s_openapi::api::apps::v1::{DeploymentSpec, ReplicaSetStatus};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, Time};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
    use k8s_openapi::jiff::{SignedDuration, Timestamp};

    const H: &str = DEFAULT_DEPLOYMENT_UNIQUE_LABEL_KEY;

    fn uid(rs: Option<&ReplicaSet>) -> Option<String> {
        rs.and_then(|rs| rs.metadata.uid.clone())
    }
    fn uids(rss: &[&ReplicaSet]) -> Vec<String> {
        rss.iter()
            .map(|rs| rs.metadata.uid.clone().unwrap())
            .collect()
    }
    fn time(t: Timestamp) -> Option<Time> {
        Some(Time(t))
    }
    fn fixtures(
        new_replicas: i32,
        old_created: Option<Time>,
    ) -> (Deployment, ReplicaSet, ReplicaSet, ReplicaSet) {
        let now = Timestamp::from_second(1_700_000_000).unwrap();
        let later = now + SignedDuration::from_secs(60);
        let deployment = generate_deployment("nginx");
        let mut new_rs = generate_rs(&deployment);
        set_rs_replicas(&mut new_rs, new_replicas);
        set_rs_label(&mut new_rs, H, "hash");
        new_rs.metadata.creation_timestamp = time(later);
        let mut new_rs_dup = generate_rs(&deployment);
        set_rs_label(&mut new_rs_dup, H, "different-hash");
        new_rs_dup.metadata.creation_timestamp = time(now);
        let mut old_deployment = generate_deployment("nginx");
        old_deployment
            .spec
            .get_mut()
            .template
            .spec
            .as_mut()
            .unwrap()
            .containers[0]
            .name = "nginx-old-1".into();
        let mut old_rs = generate_rs(&old_deployment);
        old_rs.status = Some(ReplicaSetStatus {
            fully_labeled_replicas: Some(0),
            ..Default::default()
        });
        old_rs.metadata.creation_timestamp = old_created;
        (deployment, new_rs, new_rs_dup, old_rs)
    }

    #[test]
    fn find_new_replica_set_table() {
        let (deployment, new_rs, new_rs_dup, old_rs) = fixtures(0, None);
        let cases: [(&str, Vec<&ReplicaSet>, Option<&ReplicaSet>); 3] = [
            (
                "Get new ReplicaSet with the same template as Deployment spec but different pod-template-hash value",
                vec![&new_rs, &old_rs],
                Some(&new_rs),
            ),
            (
                "Get the oldest new ReplicaSet when there are more than one ReplicaSet with the same template",
                vec![&new_rs, &old_rs, &new_rs_dup],
                Some(&new_rs_dup),
            ),
            ("Get nil new ReplicaSet", vec![&old_rs], None),
        ];
        for (name, mut rss, want) in cases {
            let got = find_new_replica_set(&deployment, &mut rss);
            assert_eq!(uid(got), uid(want), "{name}");
        }
    }

    #[test]
    fn find_old_replica_sets_table() {
        let before = Timestamp::from_second(1_700_000_000 - 60).unwrap();
        let (deployment, new_rs, new_rs_dup, old_rs) = fixtures(1, time(before));
        // (name, input, all, required)
        type Case<'a> = (
            &'a str,
            Vec<&'a ReplicaSet>,
            Vec<&'a ReplicaSet>,
            Vec<&'a ReplicaSet>,
        );
        let cases: [Case<'_>; 4] = [
            (
                "Get old ReplicaSets",
                vec![&new_rs, &old_rs],
                vec![&old_rs],
                vec![],
            ),
            (
                "Get old ReplicaSets with no new ReplicaSet",
                vec![&old_rs],
                vec![&old_rs],
                vec![],
            ),
            (
                "Get old ReplicaSets with two new ReplicaSets, only the oldest new ReplicaSet is seen as new ReplicaSet",
                vec![&old_rs, &new_rs, &new_rs_dup],
                vec![&old_rs, &new_rs],
                vec![&new_rs],
            ),
            ("Get empty old ReplicaSets", vec![&new_rs], vec![], vec![]),
        ];
        for (name, mut rss, mut want_all, want_required) in cases {
            let (required, mut all) = find_old_replica_sets(&deployment, &mut rss);
            sort_by_creation_timestamp(&mut all);
            sort_by_creation_timestamp(&mut want_all);
            assert_eq!(uids(&all), uids(&want_all), "{name}: all");
            assert_eq!(uids(&required), uids(&want_required), "{name}: required");
        }
    }

    #[test]
    fn find_new_sorts_in_place() {
        let (deployment, new_rs, new_rs_dup, old_rs) = fixtures(0, None);
        let mut rss = vec![&new_rs, &new_rs_dup, &old_rs];
        find_new_replica_set(&deployment, &mut rss);
        assert_eq!(uids(&rss), uids(&[&old_rs, &new_rs_dup, &new_rs]));
    }

    #[test]
    fn get_deployments_for_replica_set_table() {
        let deployments: Vec<Deployment> = (0..3)
            .map(|i| Deployment {
                metadata: ObjectMeta {
                    name: Some(format!("deployment-{i}")),
                    namespace: Some("test".into()),
                    ..Default::default()
                },
                spec: DeploymentSpec {
                    selector: LabelSelector {
                        match_labels: Some(map(&[("app", &format!("test-{i}"))])),
                        ..Default::default()
                    },
                    ..Default::default()
                },
                status: None,
            })
            .collect();
        let rss: Vec<ReplicaSet> = (0..5)
            .map(|i| ReplicaSet {
                metadata: ObjectMeta {
                    namespace: Some("test".into()),
                    name: Some(format!("test-replicaSet-{i}")),
                    labels: Some(map(&[
                        ("app", &format!("test-{i}")),
                        ("label", &format!("label-{i}")),
                    ])),
                    ..Default::default()
                },
                ..Default::default()
            })
            .collect();
        for (i, rs) in rss.iter().enumerate().take(3) {
            let got = get_deployments_for_replica_set(&deployments, rs).unwrap();
            assert_eq!(
                got,
                vec![deployments[i].clone()],
                "GetDeploymentsForReplicaSet for rs-{i}"
            );
        }
        for (i, rs) in rss.iter().enumerate().skip(3) {
            let err = get_deployments_for_replica_set(&deployments, rs).unwrap_err();
            assert_eq!(
                err.to_string(),
                format!(
                    "could not find deployments set for ReplicaSet test-replicaSet-{i} in namespace test with labels: map[app:test-{i} label:label-{i}]"
                ),
                "GetDeploymentsForReplicaSet for rs-{i}"
            );
        }
    }

    #[test]
    fn deployments_for_replica_set_skip_empty_selectors_and_other_namespaces() {
        let d = |ns: &str, labels: Option<BTreeMap<String, String>>| Deployment {
            metadata: ObjectMeta {
                namespace: Some(ns.into()),
                ..Default::default()
            },
            spec: DeploymentSpec {
                selector: LabelSelector {
                    match_labels: labels,
                    ..Default::default()
                },
                ..Default::default()
            },
            status: None,
        };
        let deployments = [d("test", None), d("other", Some(map(&[("app", "x")])))];
        let mut rs = ReplicaSet::default();
        rs.metadata.namespace = Some("test".into());
        rs.metadata.name = Some("rs".into());
        assert_eq!(
            get_deployments_for_replica_set(&deployments, &rs),
            Err(NoDeploymentsError::NoLabels { name: "rs".into() })
        );
        rs.metadata.labels = Some(map(&[("app", "x")]));
        assert!(get_deployments_for_replica_set(&deployments, &rs).is_err());
    }

    #[test]
    fn active_or_latest() {
        let d = generate_deployment("nginx");
        let mk = |created: i64, replicas: i32| {
            let mut rs = generate_rs(&d);
            rs.metadata.creation_timestamp = time(Timestamp::from_second(created).unwrap());
            set_rs_replicas(&mut rs, replicas);
            rs
        };
        let (old1, old2, new0, new3) = (mk(1, 0), mk(2, 0), mk(3, 0), mk(3, 3));
        assert_eq!(find_active_or_latest::<&ReplicaSet>(None, &mut []), None);
        // None active: the new one, else the newest old one.
        let mut olds = vec![&old1, &old2];
        assert_eq!(
            uid(find_active_or_latest(Some(&&new0), &mut olds)),
            uid(Some(&new0))
        );
        assert_eq!(
            uid(find_active_or_latest(None, &mut olds)),
            uid(Some(&old2))
        );
        assert_eq!(
            uids(&olds),
            uids(&[&old2, &old1]),
            "sorted newest first in place"
        );
        // One active.
        assert_eq!(
            uid(find_active_or_latest(Some(&&new3), &mut olds)),
            uid(Some(&new3))
        );
        // Two active: no single answer.
        let active_old = mk(0, 1);
        let mut olds = vec![&active_old];
        assert_eq!(find_active_or_latest(Some(&&new3), &mut olds), None);
    }

    #[test]
    fn rollback_template_loses_hash_label() {
        let mut d = generate_deployment("nginx");
        let mut rs = generate_rs(&d);
        set_rs_label(&mut rs, H, "abc");
        rs.spec
            .get_mut()
            .template
            .as_mut()
            .unwrap()
            .spec
            .as_mut()
            .unwrap()
            .containers[0]
            .image = Some("nginx:old".into());
        set_from_replica_set_template(&mut d, rs.spec.into_value().unwrap().template.unwrap());
        let t = &d.spec.get().unwrap().template;
        assert_eq!(
            t.metadata.as_ref().unwrap().labels,
            Some(map(&[("name", "nginx")]))
        );
        assert_eq!(
            t.spec.as_ref().unwrap().containers[0].image.as_deref(),
            Some("nginx:old")
        );
    }

    #[test]
    fn ownership_filters() {
        let mut d = generate_deployment("nginx");
        d.metadata.uid = Some("d-uid".into());
        let mine = generate_rs(&d);
        let other = generate_rs(&generate_deployment("other"));
        let owned = filter_owned_replica_sets(&d, &[&mine, &other]);
        assert_eq!(uids(&owned), uids(&[&mine]));
        let pod = |owner: &ReplicaSet| Pod {
            metadata: ObjectMeta {
                owner_references: Some(vec![OwnerReference {
                    uid: owner.metadata.uid.clone().unwrap(),
                    controller: Some(true),
                    ..Default::default()
                }]),
                ..Default::default()
            },
            ..Default::default()
        };
        let (p1, p2) = (pod(&mine), pod(&other));
        assert_eq!(filter_pods_owned_by(&[&mine], &[&p1, &p2]), vec![&p1]);
    }
}

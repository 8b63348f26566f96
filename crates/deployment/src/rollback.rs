//! Rollback through the deprecated `deprecated.deployment.rollback.to` annotation (upstream's
//! rollback.go): the Deployment's template becomes the template of the ReplicaSet with the
//! requested revision (0: the previous one), and the annotation is cleared with a full
//! Deployment Update.

use std::sync::Arc;

use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use kctrl_client::PostParams;
use kctrl_client::versioned::Versioned;

use crate::controller::{DeploymentController, SyncError};
use crate::events::EventType;
use crate::util::constants::{
    DEPRECATED_ROLLBACK_TO, ROLLBACK_DONE, ROLLBACK_REVISION_NOT_FOUND, ROLLBACK_TEMPLATE_UNCHANGED,
};
use crate::util::{
    equal_ignore_hash, last_revision, revision, set_deployment_annotations_to,
    set_from_replica_set_template,
};

/// `getRollbackTo`: the requested revision; `None` when the annotation is missing, empty or
/// not a base-10 integer (such a value is ignored, and never cleared).
pub fn get_rollback_to(d: &Deployment) -> Option<i64> {
    d.metadata
        .annotations
        .as_ref()?
        .get(DEPRECATED_ROLLBACK_TO)
        .filter(|v| !v.is_empty())?
        .parse()
        .ok()
}

/// `setRollbackTo(d, nil)`: removes the rollback annotation.
pub fn clear_rollback_to(d: &mut Deployment) {
    if let Some(annotations) = d.metadata.annotations.as_mut() {
        annotations.remove(DEPRECATED_ROLLBACK_TO);
    }
}

impl DeploymentController {
    /// `rollback`: rolls `d` back to the requested revision, or records why it cannot.
    pub(crate) async fn rollback(
        &self,
        d: &mut Deployment,
        rs_list: &mut Vec<Arc<ReplicaSet>>,
    ) -> Result<(), SyncError> {
        let (new_rs, old_rss) = self
            .get_all_replica_sets_and_sync_revision(d, rs_list, true)
            .await?;
        let mut all = old_rss;
        all.extend(new_rs);
        let mut target = get_rollback_to(d).unwrap_or(0);
        if target == 0 {
            target = last_revision(&all);
            if target == 0 {
                self.event(
                    d,
                    EventType::Warning,
                    ROLLBACK_REVISION_NOT_FOUND,
                    "Unable to find last revision.",
                );
                return self.update_deployment_and_clear_rollback_to(d).await;
            }
        }
        for rs in &all {
            let Ok(v) = revision(&**rs) else {
                continue;
            };
            if v == target {
                let performed = self.rollback_to_template(d, rs).await?;
                if performed {
                    let message = format!(
                        "Rolled back deployment {:?} to revision {target}",
                        d.metadata.name.as_deref().unwrap_or("")
                    );
                    self.event(d, EventType::Normal, ROLLBACK_DONE, &message);
                }
                return Ok(());
            }
        }
        self.event(
            d,
            EventType::Warning,
            ROLLBACK_REVISION_NOT_FOUND,
            "Unable to find the revision to rollback to.",
        );
        self.update_deployment_and_clear_rollback_to(d).await
    }

    /// `rollbackToTemplate`: copies `rs`'s template (and its annotations) into `d` if it
    /// differs, then clears the rollback annotation. Returns whether the template changed.
    async fn rollback_to_template(
        &self,
        d: &mut Deployment,
        rs: &ReplicaSet,
    ) -> Result<bool, SyncError> {
        let rs_template = rs
            .spec
            .get()
            .and_then(|s| s.template.clone())
            .unwrap_or_default();
        let current = d.spec.get().map(|s| s.template.clone()).unwrap_or_default();
        let performed = if equal_ignore_hash(&current, &rs_template) {
            let message = format!(
                "The rollback revision contains the same template as current deployment {:?}",
                d.metadata.name.as_deref().unwrap_or("")
            );
            self.event(d, EventType::Warning, ROLLBACK_TEMPLATE_UNCHANGED, &message);
            false
        } else {
            tracing::info!(
                namespace = d.metadata.namespace.as_deref().unwrap_or(""),
                name = d.metadata.name.as_deref().unwrap_or(""),
                replica_set = rs.metadata.name.as_deref().unwrap_or(""),
                "rolling back deployment to an old template"
            );
            set_from_replica_set_template(d, rs_template);
            set_deployment_annotations_to(d, rs);
            true
        };
        self.update_deployment_and_clear_rollback_to(d).await?;
        Ok(performed)
    }

    /// `updateDeploymentAndClearRollbackTo`: a full Update of `d` without the annotation.
    async fn update_deployment_and_clear_rollback_to(
        &self,
        d: &mut Deployment,
    ) -> Result<(), SyncError> {
        clear_rollback_to(d);
        let namespace = d.metadata.namespace.clone().unwrap_or_default();
        let updated = self
            .deployments_api(&namespace)
            .update(&PostParams::default(), d)
            .await?;
        let replaced = std::mem::replace(
            &mut d.metadata.resource_version,
            updated.metadata.resource_version,
        );
        self.note_own_write(d, replaced);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    #[test]
    fn rollback_to_parsing() {
        let with = |v: &str| Deployment {
            metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
                annotations: Some(BTreeMap::from([(
                    DEPRECATED_ROLLBACK_TO.to_owned(),
                    v.to_owned(),
                )])),
                ..Default::default()
            },
            ..Default::default()
        };
        assert_eq!(get_rollback_to(&with("0")), Some(0));
        assert_eq!(get_rollback_to(&with("3")), Some(3));
        assert_eq!(get_rollback_to(&with("")), None);
        assert_eq!(get_rollback_to(&with("abc")), None);
        assert_eq!(get_rollback_to(&Deployment::default()), None);
        let mut d = with("2");
        clear_rollback_to(&mut d);
        assert_eq!(get_rollback_to(&d), None);
    }
}

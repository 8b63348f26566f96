//! Installing a CustomResourceDefinition and waiting until it can be used.

use std::time::Duration;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kctrl_client::{Api, Client, PostParams, ResourceRef, Scope};

use crate::Error;

/// Creates `crd` (unless one of its name exists) and waits until it is Established and the
/// resource of its storage version is served, for at most `timeout`.
pub(crate) async fn install(
    client: &Client,
    crd: CustomResourceDefinition,
    timeout: Duration,
) -> Result<(), Error> {
    let name = crd.metadata.name.clone().unwrap_or_default();
    let fail = |reason: String| Error::Crd {
        name: name.clone(),
        reason,
    };
    let version = crd
        .spec
        .versions
        .iter()
        .find(|v| v.storage)
        .or(crd.spec.versions.first())
        .ok_or_else(|| fail("it has no version".into()))?
        .name
        .clone();
    let resource = ResourceRef::new(
        crd.spec.group.clone(),
        version,
        crd.spec.names.plural.clone(),
        crd.spec.names.kind.clone(),
        if crd.spec.scope == "Cluster" {
            Scope::Cluster
        } else {
            Scope::Namespaced
        },
    );
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    if crds.get_opt(&name).await?.is_none() {
        match crds.create(&PostParams::default(), &crd).await {
            Ok(_) => {}
            // Another test of a shared environment created it in the meantime.
            Err(e) if e.is_already_exists() => {}
            Err(e) => return Err(e.into()),
        }
    }
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        let conditions = crds
            .get(&name)
            .await?
            .status
            .and_then(|s| s.conditions)
            .unwrap_or_default();
        if let Some(c) = conditions
            .iter()
            .find(|c| c.type_ == "NonStructuralSchema" && c.status == "True")
        {
            return Err(fail(format!(
                "its schema is not structural: {}",
                c.message.as_deref().unwrap_or("")
            )));
        }
        let established = conditions
            .iter()
            .any(|c| c.type_ == "Established" && c.status == "True");
        // Established comes a moment before every handler of the apiserver serves it.
        if established && client.is_served(&resource).await? {
            return Ok(());
        }
        if tokio::time::Instant::now() > deadline {
            return Err(fail(format!(
                "not Established and served after {timeout:?}; conditions: {}",
                conditions
                    .iter()
                    .map(|c| format!("{}={}", c.type_, c.status))
                    .collect::<Vec<_>>()
                    .join(", ")
            )));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

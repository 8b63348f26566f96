//! What several activities do through kctrl's client (so it needs kctrl's libraries and cannot
//! live in the layer crates, which do not depend on them).

/// Creates namespace `name` with `labels`; one that already exists is fine.
pub(crate) async fn ensure_namespace(
    client: &kctrl_client::Client,
    name: &str,
    labels: &[(&str, &str)],
) -> anyhow::Result<()> {
    use k8s_openapi::api::core::v1::Namespace;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    let ns = Namespace {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            labels: (!labels.is_empty()).then(|| {
                labels
                    .iter()
                    .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                    .collect()
            }),
            ..Default::default()
        },
        ..Default::default()
    };
    let api = kctrl_client::Api::<Namespace>::all(client.clone());
    match api.create(&kctrl_client::PostParams::default(), &ns).await {
        Ok(_) => Ok(()),
        Err(e) if e.is_already_exists() => Ok(()),
        Err(e) => Err(anyhow::anyhow!("creating namespace {name}: {e}")),
    }
}

/// Deletes namespace `name` and waits until it is gone (at most `timeout`); one that does not
/// exist is fine.
pub(crate) async fn delete_namespace(
    client: &kctrl_client::Client,
    name: &str,
    timeout: std::time::Duration,
) -> anyhow::Result<()> {
    use k8s_openapi::api::core::v1::Namespace;
    let api = kctrl_client::Api::<Namespace>::all(client.clone());
    match api
        .delete(name, &kctrl_client::DeleteParams::default())
        .await
    {
        Ok(_) => {}
        Err(e) if e.is_not_found() => return Ok(()),
        Err(e) => anyhow::bail!("deleting namespace {name}: {e}"),
    }
    let started = std::time::Instant::now();
    loop {
        match api.get(name).await {
            Err(e) if e.is_not_found() => return Ok(()),
            _ => {}
        }
        if started.elapsed() > timeout {
            anyhow::bail!("namespace {name} still exists {timeout:?} after its deletion");
        }
        tokio::time::sleep(std::time::Duration::from_millis(250)).await;
    }
}

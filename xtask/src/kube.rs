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

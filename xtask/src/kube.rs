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

/// kube-apiserver's ShardedListAndWatch gate, for the commands that run with it on, off or
/// both (`chaos --profile sharded`, `bench shard`): which runs to make.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Gate {
    /// `ShardedListAndWatch=true` only.
    On,
    /// `ShardedListAndWatch=false` only (client-side filtering).
    Off,
    /// One run with the gate on, then one with it off.
    Both,
}

impl Gate {
    /// The gate's settings to run with, in order.
    pub(crate) fn settings(self) -> Vec<bool> {
        match self {
            Gate::On => vec![true],
            Gate::Off => vec![false],
            Gate::Both => vec![true, false],
        }
    }
}

/// `n` namespace names for a sharded run: six random lowercase letters and digits, then
/// `-shard`; the part that varies comes first, so their hashes spread over the buckets
/// (FNV-1a barely moves the bucket for a change at the end of a name).
pub(crate) fn namespace_names(rng: &mut fastrand::Rng, n: usize) -> Vec<String> {
    let mut names = std::collections::BTreeSet::new();
    while names.len() < n {
        let prefix: String = (0..6)
            .map(|_| {
                let c = rng.u8(0..36);
                char::from(if c < 26 { b'a' + c } else { b'0' + c - 26 })
            })
            .collect();
        names.insert(format!("{prefix}-shard"));
    }
    names.into_iter().collect()
}

/// A Deployment's numbers that decide whether its rollout is complete.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct RolloutState {
    pub(crate) generation: i64,
    pub(crate) observed_generation: i64,
    pub(crate) spec_replicas: i32,
    pub(crate) replicas: i32,
    pub(crate) updated: i32,
    pub(crate) available: i32,
}

impl RolloutState {
    /// Complete at `want` replicas: the controller saw the latest spec, and every replica is
    /// of the current template and available, with no old replica left.
    pub(crate) fn complete(&self, want: i32) -> bool {
        self.observed_generation >= self.generation
            && self.spec_replicas == want
            && self.updated == want
            && self.replicas == want
            && self.available == want
    }
}

/// The numbers of `d` that decide whether its rollout is complete.
pub(crate) fn rollout_state(d: &k8s_openapi::api::apps::v1::Deployment) -> RolloutState {
    use kctrl_client::versioned::Versioned;
    let status = d.status.clone().unwrap_or_default();
    RolloutState {
        generation: d.metadata.generation.unwrap_or(0),
        observed_generation: status.observed_generation.unwrap_or(0),
        spec_replicas: d.spec.get().and_then(|s| s.replicas).unwrap_or(1),
        replicas: status.replicas.unwrap_or(0),
        updated: status.updated_replicas.unwrap_or(0),
        available: status.available_replicas.unwrap_or(0),
    }
}

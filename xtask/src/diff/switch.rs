//! `cargo xtask diff --switch N`: what switching a cluster between kube-controller-manager's
//! Deployment controller and ours costs.
//!
//! On a fresh cluster (`diff-switch`) upstream's controller creates N Deployments x 2 replicas
//! and rolls each to a second template (so every Deployment has an old and a new ReplicaSet).
//! Then upstream's controller stops, ours starts, and once everything is quiet again the run
//! counts ReplicaSets created, deleted and written, pods created and deleted, and Deployments
//! written. Ours then rolls every Deployment to a third template, and the switch is measured
//! the other way (ours stops, upstream's starts). Each controller names the ReplicaSets it
//! creates with its own pod-template-hash; both find the ReplicaSet of the current template by
//! template equality, so the expected churn is none.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::fs;
use std::thread;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use serde_json::{Value, json};

use super::{Clusters, Side, out_dir};
use kctrl_cluster::toolchain::{Cache, fmt_duration};
use kctrl_cluster::versions::{Binary, Release};
use xtask_contender::supervisor;

/// The cluster of the measurement.
const CLUSTER: &str = "diff-switch";
/// Its namespace.
const NAMESPACE: &str = "switch";
/// Replicas per Deployment.
const REPLICAS: u64 = 2;
/// The three templates differ by image.
const IMAGES: [&str; 3] = [
    "registry.k8s.io/pause:3.10",
    "registry.k8s.io/pause:3.9",
    "registry.k8s.io/pause:3.8",
];
/// How long the cluster must stay unchanged after a switch before the counts are taken.
const QUIET: Duration = Duration::from_secs(10);
/// Longest wait for a rollout or a quiet cluster.
const TIMEOUT: Duration = Duration::from_secs(600);

/// uid and resourceVersion of each object, by kind and name.
type Objects = BTreeMap<(String, String), (String, String)>;

/// One Deployment of the workload.
fn deployment(i: usize) -> Value {
    let name = format!("sw-{i:04}");
    json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {
            "replicas": REPLICAS,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "app", "image": IMAGES[0]}]},
            },
        },
    })
}

/// Whether every Deployment of the list has rolled out completely.
fn complete(list: &Value, n: usize) -> bool {
    let ds: Vec<&Value> = list["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|i| i["kind"] == "Deployment")
        .collect();
    ds.len() == n
        && ds.iter().all(|d| {
            let s = &d["status"];
            s["observedGeneration"] == d["metadata"]["generation"]
                && s["updatedReplicas"] == REPLICAS
                && s["availableReplicas"] == REPLICAS
                && s["replicas"] == REPLICAS
        })
}

/// uid and resourceVersion of every Deployment, ReplicaSet and Pod of the list.
fn objects(list: &Value) -> Objects {
    list["items"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|o| {
            let m = &o["metadata"];
            let s = |v: &Value| v.as_str().unwrap_or_default().to_owned();
            (
                (s(&o["kind"]), s(&m["name"])),
                (s(&m["uid"]), s(&m["resourceVersion"])),
            )
        })
        .collect()
}

/// What changed between two listings, per kind: created, deleted, written (same uid, new
/// resourceVersion).
#[derive(Debug, Default, PartialEq)]
pub(crate) struct Churn {
    /// Kind → (created, deleted, written).
    pub(crate) by_kind: BTreeMap<String, (usize, usize, usize)>,
}

/// Compares two listings (objects are the same if their uid is).
pub(crate) fn churn(before: &Objects, after: &Objects) -> Churn {
    let mut out = Churn::default();
    for kind in ["Deployment", "ReplicaSet", "Pod"] {
        let uids = |o: &Objects| -> BTreeMap<String, String> {
            o.iter()
                .filter(|((k, _), _)| k == kind)
                .map(|(_, (uid, rv))| (uid.clone(), rv.clone()))
                .collect()
        };
        let (b, a) = (uids(before), uids(after));
        let created = a.keys().filter(|u| !b.contains_key(*u)).count();
        let deleted = b.keys().filter(|u| !a.contains_key(*u)).count();
        let written = a
            .iter()
            .filter(|(u, rv)| b.get(*u).is_some_and(|old| old != *rv))
            .count();
        out.by_kind
            .insert(kind.to_owned(), (created, deleted, written));
    }
    out
}

fn list(side: &Side) -> Result<Value> {
    side.get_json(NAMESPACE, "deployments,replicasets,pods")
}

fn wait_complete(side: &Side, n: usize) -> Result<Value> {
    let started = Instant::now();
    loop {
        let l = list(side)?;
        if complete(&l, n) {
            eprintln!(
                "==> {n} Deployments complete after {}",
                fmt_duration(started.elapsed())
            );
            return Ok(l);
        }
        if started.elapsed() > TIMEOUT {
            bail!("{n} Deployments did not complete within {TIMEOUT:?}");
        }
        thread::sleep(Duration::from_secs(1));
    }
}

/// Waits until the listing has not changed (by resourceVersions) for [`QUIET`].
fn wait_quiet(side: &Side) -> Result<Value> {
    let started = Instant::now();
    let mut last = (objects(&list(side)?), Instant::now());
    loop {
        thread::sleep(Duration::from_secs(1));
        let l = list(side)?;
        let now = objects(&l);
        if now != last.0 {
            last = (now, Instant::now());
        } else if last.1.elapsed() >= QUIET {
            return Ok(l);
        }
        if started.elapsed() > TIMEOUT {
            bail!("the cluster did not stay quiet for {QUIET:?} within {TIMEOUT:?}");
        }
    }
}

fn set_image(side: &Side, image: &str) -> Result<()> {
    let (code, _, err) = side.kubectl_in(
        Some(NAMESPACE),
        &[
            "set",
            "image",
            "deployments",
            "--all",
            &format!("app={image}"),
        ],
        None,
    )?;
    if code != 0 {
        bail!("kubectl set image: {}", err.trim());
    }
    Ok(())
}

/// Hash values in use: how many ReplicaSets carry a name of the form `<deployment>-<hash>`.
fn replica_sets(list: &Value) -> usize {
    list["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|o| o["kind"] == "ReplicaSet")
        .count()
}

pub(crate) fn run(n: usize, keep: bool, release: &'static Release) -> Result<()> {
    if n == 0 {
        bail!("--switch needs at least one Deployment");
    }
    let started = Instant::now();
    let ours_binary = supervisor::build_dist()?;
    let cache = Cache::locate(release)?;
    kctrl_cluster::toolchain::ensure_built(&cache)?;
    let kcm = cache.binary(Binary::KubeControllerManager);
    let out = out_dir();
    fs::create_dir_all(&out).with_context(|| format!("creating {}", out.display()))?;
    let clusters = Clusters::start(&[(CLUSTER, true)], release)?;
    let info = clusters.infos[0].clone();
    let result = (|| -> Result<String> {
        let up = Side::start_upstream(&info, &kcm)?;
        up.kubectl_in(None, &["create", "namespace", NAMESPACE], None)?;
        let deadline = Instant::now() + Duration::from_secs(30);
        while up
            .kubectl_in(Some(NAMESPACE), &["get", "serviceaccount", "default"], None)?
            .0
            != 0
        {
            if Instant::now() > deadline {
                bail!("no default ServiceAccount in {NAMESPACE}");
            }
            thread::sleep(Duration::from_millis(300));
        }
        let items: Vec<Value> = (0..n).map(deployment).collect();
        let manifest = json!({"apiVersion": "v1", "kind": "List", "items": items}).to_string();
        let (code, _, err) =
            up.kubectl_in(Some(NAMESPACE), &["apply", "-f", "-"], Some(&manifest))?;
        if code != 0 {
            bail!("creating the Deployments: {}", err.trim());
        }
        wait_complete(&up, n)?;
        set_image(&up, IMAGES[1])?;
        wait_complete(&up, n)?;
        let before = wait_quiet(&up)?;
        up.stop()?;

        let ours = Side::start_ours(&info, &ours_binary, false)?;
        let t = Instant::now();
        let after = wait_quiet(&ours)?;
        let to_ours = churn(&objects(&before), &objects(&after));
        let still = complete(&after, n);
        let quiet_after = t.elapsed();
        set_image(&ours, IMAGES[2])?;
        wait_complete(&ours, n)?;
        let before_back = wait_quiet(&ours)?;
        ours.stop()?;

        let up = Side::start_upstream(&info, &kcm)?;
        let after_back = wait_quiet(&up)?;
        let to_upstream = churn(&objects(&before_back), &objects(&after_back));
        let still_back = complete(&after_back, n);
        up.stop()?;

        let mut text = String::new();
        let _ = writeln!(
            text,
            "# Switching the Deployment controller: {n} Deployments x {REPLICAS} replicas\n\n\
             Kubernetes {}. Each Deployment had {} ReplicaSets (two templates) before the first switch and {} \
             after the third template. Counts over the {}s of quiet after each switch \
             (the first took {} to become quiet).\n",
            release.kubernetes,
            replica_sets(&before) / n,
            replica_sets(&before_back) / n,
            QUIET.as_secs(),
            fmt_duration(quiet_after)
        );
        text.push_str(&switch_table(&[
            ("upstream → ours", &to_ours, still),
            ("ours → upstream", &to_upstream, still_back),
        ]));
        let _ = writeln!(text, "\nTook {}.", fmt_duration(started.elapsed()));
        Ok(text)
    })();
    let down = if keep {
        clusters.dismiss();
        Ok(())
    } else {
        clusters.down()
    };
    let text = result?;
    down?;
    let path = out.join("switch.md");
    fs::write(&path, &text).with_context(|| format!("writing {}", path.display()))?;
    print!("{text}");
    Ok(())
}

/// The table of the switches: per switch (label, churn, whether every Deployment was complete
/// after it), one line per kind of object.
fn switch_table(switches: &[(&str, &Churn, bool)]) -> String {
    let mut t = xtask_report::markdown::Table::new()
        .left("switch")
        .left("kind")
        .left("created")
        .left("deleted")
        .left("written")
        .left("all complete after");
    for &(label, c, ok) in switches {
        for (kind, (created, deleted, written)) in &c.by_kind {
            t.row([
                label.to_owned(),
                kind.clone(),
                created.to_string(),
                deleted.to_string(),
                written.to_string(),
                if ok { "yes" } else { "no" }.to_owned(),
            ]);
        }
    }
    t.markdown()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn obj(kind: &str, name: &str, uid: &str, rv: &str) -> Value {
        json!({"kind": kind, "metadata": {"name": name, "uid": uid, "resourceVersion": rv}})
    }

    #[test]
    fn churn_counts_created_deleted_and_written_objects_by_uid() {
        let before = json!({"items": [
            obj("ReplicaSet", "a-1", "u1", "10"),
            obj("ReplicaSet", "a-2", "u2", "11"),
            obj("Pod", "p", "u3", "12"),
            obj("Deployment", "a", "u4", "13"),
        ]});
        let after = json!({"items": [
            obj("ReplicaSet", "a-1", "u1", "10"),
            obj("ReplicaSet", "a-2", "u2", "20"),
            obj("ReplicaSet", "a-3", "u5", "21"),
            obj("Pod", "p", "u6", "22"),
            obj("Deployment", "a", "u4", "13"),
        ]});
        let c = churn(&objects(&before), &objects(&after));
        assert_eq!(c.by_kind["ReplicaSet"], (1, 0, 1));
        assert_eq!(c.by_kind["Pod"], (1, 1, 0));
        assert_eq!(c.by_kind["Deployment"], (0, 0, 0));
        assert_eq!(
            churn(&objects(&before), &objects(&before)).by_kind["Pod"],
            (0, 0, 0)
        );
    }

    #[test]
    fn the_switch_table_is_rendered_as_before() {
        let to_ours = Churn {
            by_kind: BTreeMap::from([
                ("Pod".to_owned(), (0, 0, 2)),
                ("ReplicaSet".to_owned(), (0, 0, 1)),
            ]),
        };
        let back = Churn {
            by_kind: BTreeMap::from([("ReplicaSet".to_owned(), (1, 0, 3))]),
        };
        xtask_report::golden::check(
            &std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src/diff/golden/switch.md"),
            &switch_table(&[
                ("upstream → ours", &to_ours, true),
                ("ours → upstream", &back, false),
            ]),
        );
    }

    #[test]
    fn completeness_needs_every_deployment_rolled_out() {
        let d = |generation: u64, observed: u64, updated: u64| {
            json!({"kind": "Deployment", "metadata": {"generation": generation},
                   "status": {"observedGeneration": observed, "updatedReplicas": updated,
                              "availableReplicas": 2, "replicas": 2}})
        };
        assert!(complete(&json!({"items": [d(2, 2, 2)]}), 1));
        assert!(!complete(&json!({"items": [d(2, 1, 2)]}), 1));
        assert!(!complete(&json!({"items": [d(2, 2, 1)]}), 1));
        assert!(!complete(&json!({"items": [d(2, 2, 2)]}), 2));
        assert_eq!(deployment(7)["metadata"]["name"], "sw-0007");
    }
}

//! What a user can observe of a scenario's namespace, normalised so that two clusters compare.
//!
//! From `kubectl get deployments,replicasets,pods -o json`, the Deployments' events and
//! `kubectl rollout status` / `rollout history`, [`Observation`] builds one JSON tree:
//!
//! - per Deployment: `generation`, labels, annotations (without
//!   `kubectl.kubernetes.io/last-applied-configuration`, the client's own input), finalizers,
//!   whether it is being deleted, `spec`, `status` (conditions keyed by type, their order kept
//!   in `conditionOrder`, timestamps dropped), its ReplicaSets (controller owner reference) keyed
//!   by name, its events and the two `kubectl rollout` outputs;
//! - ReplicaSets without a Deployment as controller (orphans, released ones);
//! - Pods counted by owner, phase, readiness and deletion (pod names are random).
//!
//! Uids, resourceVersions, managed fields and timestamps are left out. Generated names are
//! replaced consistently by [`Names`]: a ReplicaSet named `<deployment>-<pod-template-hash>`
//! becomes `<deployment:rsK>` and its hash `<deployment:hashK>`, K counting the ReplicaSets of
//! that prefix in the order the run first saw them (ties by revision, then creation time), so
//! the same rollout gives the same labels on both clusters whatever the hash function.
//! `kubectl.kubernetes.io/restartedAt` values become `<time>`. Events come from a watch (see
//! [`super::events`]), each version counting; an aggregated event (an event recorder's
//! `(combined from similar events): …`) counts as the message it carries.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Map, Value, json};

/// Annotation `kubectl rollout restart` sets on the pod template (a timestamp).
const RESTARTED_AT: &str = "kubectl.kubernetes.io/restartedAt";
/// Annotation `kubectl apply` keeps its input in.
const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";
/// The label the Deployment controller puts on its ReplicaSets and pods.
const HASH_LABEL: &str = "pod-template-hash";
/// How an event recorder prefixes the message of an aggregate of similar events.
const AGGREGATED: &str = "(combined from similar events): ";
/// The revision annotation of ReplicaSets.
const REVISION: &str = "deployment.kubernetes.io/revision";

/// The generated names and hashes one cluster has shown so far, and their stable labels.
#[derive(Debug, Default, Clone)]
pub(crate) struct Names {
    /// Generated ReplicaSet name → label.
    replica_sets: BTreeMap<String, String>,
    /// pod-template-hash value → label.
    hashes: BTreeMap<String, String>,
    /// Labels handed out per name prefix.
    counters: BTreeMap<String, usize>,
    /// Names of ReplicaSets not named after their pod-template-hash (a scenario's own, kept as
    /// they are):
    /// the random suffix of their pods' names is replaced.
    bare: BTreeSet<String>,
}

impl Names {
    /// Labels every generated ReplicaSet name of `replica_sets` not seen before.
    pub(crate) fn learn(&mut self, replica_sets: &[&Value]) {
        let mut fresh: Vec<(u64, String, String, String, String)> = replica_sets
            .iter()
            .filter_map(|rs| {
                let name = rs.pointer("/metadata/name")?.as_str()?;
                let hash = rs.pointer("/metadata/labels")?.get(HASH_LABEL)?.as_str()?;
                let prefix = name.strip_suffix(hash)?.strip_suffix('-')?;
                if prefix.is_empty() || self.replica_sets.contains_key(name) {
                    return None;
                }
                let revision = annotation(rs, REVISION)
                    .and_then(|r| r.parse().ok())
                    .unwrap_or(u64::MAX);
                let created = rs
                    .pointer("/metadata/creationTimestamp")
                    .and_then(Value::as_str)
                    .unwrap_or_default();
                Some((
                    revision,
                    created.to_owned(),
                    name.to_owned(),
                    prefix.to_owned(),
                    hash.to_owned(),
                ))
            })
            .collect();
        fresh.sort();
        for (_, _, name, prefix, hash) in fresh {
            let k = self.counters.entry(prefix.clone()).or_default();
            *k += 1;
            self.replica_sets.insert(name, format!("<{prefix}:rs{k}>"));
            self.hashes
                .entry(hash)
                .or_insert_with(|| format!("<{prefix}:hash{k}>"));
        }
        // Names not made of a prefix and the pod-template-hash (a scenario's own, also one
        // labelled with a hash of its choosing) stay as they are.
        for rs in replica_sets {
            if let Some(name) = rs.pointer("/metadata/name").and_then(Value::as_str)
                && !self.replica_sets.contains_key(name)
            {
                self.bare.insert(name.to_owned());
            }
        }
    }

    /// `text` with every known generated name and hash replaced by its label (longest first,
    /// so a name is replaced before the hash inside it).
    pub(crate) fn apply(&self, text: &str) -> String {
        let mut pairs: Vec<(&String, &String)> =
            self.replica_sets.iter().chain(self.hashes.iter()).collect();
        pairs.sort_by_key(|(from, _)| std::cmp::Reverse(from.len()));
        let mut out = text.to_owned();
        for (from, to) in pairs {
            if out.contains(from.as_str()) {
                out = out.replace(from.as_str(), to);
            }
        }
        let mut out = pod_suffixes(&out);
        for name in &self.bare {
            out = bare_pod_suffixes(&out, name);
        }
        out
    }

    /// `value` with [`Names::apply`] applied to every string and object key.
    pub(crate) fn apply_value(&self, value: &Value) -> Value {
        match value {
            Value::String(s) => Value::String(self.apply(s)),
            Value::Array(items) => {
                Value::Array(items.iter().map(|v| self.apply_value(v)).collect())
            }
            Value::Object(map) => Value::Object(
                map.iter()
                    .map(|(k, v)| (self.apply(k), self.apply_value(v)))
                    .collect(),
            ),
            other => other.clone(),
        }
    }
}

/// Length of the random suffix of a pod name generated from its ReplicaSet's name.
const POD_SUFFIX_LEN: usize = 5;

/// `text` with the random suffix of every pod name generated from a labelled ReplicaSet name
/// (`<web:rs1>-x7k2p`) replaced by `<pod>`.
fn pod_suffixes(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find(">-") {
        let (head, tail) = rest.split_at(at + 2);
        out.push_str(head);
        let suffix: String = tail
            .chars()
            .take_while(char::is_ascii_alphanumeric)
            .collect();
        let labelled = head
            .rfind('<')
            .is_some_and(|open| head[open..].contains(":rs"));
        if labelled && suffix.len() == POD_SUFFIX_LEN {
            out.push_str("<pod>");
            rest = &tail[POD_SUFFIX_LEN..];
        } else {
            rest = tail;
        }
    }
    out.push_str(rest);
    out
}

/// `text` with the random suffix of every pod name generated from ReplicaSet `name` (a whole
/// word `<name>-x7k2p`) replaced by `<pod>`.
fn bare_pod_suffixes(text: &str, name: &str) -> String {
    let word = |c: char| c.is_ascii_alphanumeric() || c == '-' || c == '.';
    let needle = format!("{name}-");
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find(&needle) {
        let starts_word = rest[..at]
            .chars()
            .last()
            .or_else(|| out.chars().last())
            .is_none_or(|c| !word(c));
        let (head, tail) = rest.split_at(at + needle.len());
        out.push_str(head);
        let suffix: String = tail.chars().take_while(|c| word(*c)).collect();
        if starts_word
            && suffix.len() == POD_SUFFIX_LEN
            && suffix.chars().all(|c| c.is_ascii_alphanumeric())
        {
            out.push_str("<pod>");
            rest = &tail[POD_SUFFIX_LEN..];
        } else {
            rest = tail;
        }
    }
    out.push_str(rest);
    out
}

fn annotation<'a>(object: &'a Value, key: &str) -> Option<&'a str> {
    object.pointer("/metadata/annotations")?.get(key)?.as_str()
}

/// The controller owner reference of `object`: (kind, name).
fn controller_of(object: &Value) -> Option<(String, String)> {
    object
        .pointer("/metadata/ownerReferences")?
        .as_array()?
        .iter()
        .find(|r| r["controller"] == true)
        .map(|r| {
            (
                r["kind"].as_str().unwrap_or_default().to_owned(),
                r["name"].as_str().unwrap_or_default().to_owned(),
            )
        })
}

/// Labels, annotations (minus `drop`), finalizers and deletion of `object`'s metadata.
fn meta(object: &Value, drop: &[&str]) -> Map<String, Value> {
    let m = &object["metadata"];
    let mut out = Map::new();
    let mut annotations = m["annotations"].as_object().cloned().unwrap_or_default();
    for key in drop {
        annotations.remove(*key);
    }
    out.insert("labels".into(), m["labels"].clone());
    out.insert("annotations".into(), Value::Object(annotations));
    if let Some(f) = m.get("finalizers") {
        out.insert("finalizers".into(), f.clone());
    }
    out.insert(
        "deleting".into(),
        json!(m.get("deletionTimestamp").is_some()),
    );
    out.insert("generation".into(), m["generation"].clone());
    out
}

/// Owner references without uids.
fn owners(object: &Value) -> Value {
    let refs = object
        .pointer("/metadata/ownerReferences")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    Value::Array(
        refs.iter()
            .map(|r| {
                json!({
                    "kind": r["kind"], "name": r["name"],
                    "controller": r["controller"], "blockOwnerDeletion": r["blockOwnerDeletion"],
                })
            })
            .collect(),
    )
}

/// `conditions` keyed by type without their timestamps, and the order of the types.
fn conditions(status: &mut Value) {
    let Some(list) = status.get("conditions").and_then(Value::as_array).cloned() else {
        return;
    };
    let mut by_type = Map::new();
    let mut order = Vec::new();
    for c in list {
        let t = c["type"].as_str().unwrap_or_default().to_owned();
        order.push(json!(t));
        by_type.insert(
            t,
            json!({"status": c["status"], "reason": c["reason"], "message": c["message"]}),
        );
    }
    status["conditions"] = Value::Object(by_type);
    status["conditionOrder"] = Value::Array(order);
}

/// A pod template with `restartedAt` values replaced.
fn template(t: &Value) -> Value {
    let mut t = t.clone();
    if let Some(a) = t
        .pointer_mut("/metadata/annotations")
        .and_then(Value::as_object_mut)
        && a.contains_key(RESTARTED_AT)
    {
        a.insert(RESTARTED_AT.into(), json!("<time>"));
    }
    t
}

fn replica_set(rs: &Value) -> Value {
    let mut out = meta(rs, &[]);
    out.insert("ownerReferences".into(), owners(rs));
    let spec = &rs["spec"];
    out.insert(
        "spec".into(),
        json!({
            "replicas": spec["replicas"], "minReadySeconds": spec["minReadySeconds"],
            "selector": spec["selector"], "template": template(&spec["template"]),
        }),
    );
    let mut status = rs["status"].clone();
    conditions(&mut status);
    out.insert("status".into(), status);
    Value::Object(out)
}

fn deployment(d: &Value) -> Value {
    let mut out = meta(d, &[LAST_APPLIED]);
    let mut spec = d["spec"].clone();
    spec["template"] = template(&spec["template"]);
    out.insert("spec".into(), spec);
    let mut status = d["status"].clone();
    conditions(&mut status);
    out.insert("status".into(), status);
    out.insert("replicaSets".into(), json!({}));
    Value::Object(out)
}

/// One cluster's normalised state of a namespace.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Observation(pub(crate) Value);

impl Observation {
    /// Builds the state from a `kubectl get deployments,replicasets,pods -o json` list, learning
    /// new generated names into `names` first.
    pub(crate) fn from_list(list: &Value, names: &mut Names) -> Observation {
        let items: Vec<&Value> = list["items"]
            .as_array()
            .map(|v| v.iter().collect())
            .unwrap_or_default();
        let of_kind =
            |k: &str| -> Vec<&Value> { items.iter().copied().filter(|i| i["kind"] == k).collect() };
        let rss = of_kind("ReplicaSet");
        names.learn(&rss);
        let mut deployments = Map::new();
        for d in of_kind("Deployment") {
            let name = d["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_owned();
            deployments.insert(name, deployment(d));
        }
        let mut orphans = Map::new();
        for rs in rss {
            let name = names.apply(rs["metadata"]["name"].as_str().unwrap_or_default());
            let value = names.apply_value(&replica_set(rs));
            match controller_of(rs) {
                Some((kind, owner)) if kind == "Deployment" && deployments.contains_key(&owner) => {
                    deployments[&owner]["replicaSets"][&name] = value;
                }
                _ => {
                    orphans.insert(name, value);
                }
            }
        }
        let mut pods: BTreeMap<String, u64> = BTreeMap::new();
        let mut named = Map::new();
        for p in of_kind("Pod") {
            let owner = controller_of(p)
                .map(|(k, n)| format!("{k} {}", names.apply(&n)))
                .unwrap_or_else(|| "no owner".to_owned());
            let ready = p["status"]["conditions"]
                .as_array()
                .and_then(|cs| cs.iter().find(|c| c["type"] == "Ready"))
                .is_some_and(|c| c["status"] == "True");
            let phase = p["status"]["phase"].as_str().unwrap_or("no phase");
            let deleting = p["metadata"].get("deletionTimestamp").is_some();
            // A pod the scenario named itself is shown on its own: which of them an adoption,
            // a release or a scale-down chose is what differs if anything does.
            if p["metadata"].get("generateName").is_none()
                && let Some(name) = p["metadata"]["name"].as_str()
            {
                named.insert(
                    name.to_owned(),
                    json!({
                        "owner": owner, "phase": phase, "ready": ready, "deleting": deleting,
                        "labels": p["metadata"]["labels"],
                        "ownerReferences": names.apply_value(&owners(p)),
                    }),
                );
                continue;
            }
            let key = format!(
                "{owner}, {phase}{}{}",
                if ready { ", ready" } else { "" },
                if deleting { ", deleting" } else { "" }
            );
            *pods.entry(key).or_default() += 1;
        }
        let deployments = names.apply_value(&Value::Object(deployments));
        let mut out = json!({
            "deployments": deployments,
            "replicaSetsWithoutDeployment": orphans,
            "pods": pods,
        });
        if !named.is_empty() {
            out["namedPods"] = Value::Object(named);
        }
        Observation(out)
    }

    /// Whether every Deployment's and every ReplicaSet's `status.observedGeneration` has caught
    /// up (but for ReplicaSets being deleted).
    pub(crate) fn generations_observed(&self) -> bool {
        let caught_up = |o: &Value| {
            o["deleting"] == true
                || o["status"]["observedGeneration"].as_i64() >= o["generation"].as_i64()
        };
        let deployments = self.0["deployments"].as_object();
        let owned = deployments
            .into_iter()
            .flat_map(|ds| ds.values())
            .filter_map(|d| d["replicaSets"].as_object())
            .flat_map(|rss| rss.values());
        let bare = self.0["replicaSetsWithoutDeployment"]
            .as_object()
            .into_iter()
            .flat_map(|rss| rss.values());
        deployments.is_none_or(|ds| {
            ds.values()
                .all(|d| d["status"]["observedGeneration"].as_i64() >= d["generation"].as_i64())
        }) && owned.chain(bare).all(caught_up)
    }

    /// Names of the Deployments.
    pub(crate) fn deployment_names(&self) -> Vec<String> {
        self.0["deployments"]
            .as_object()
            .map(|m| m.keys().cloned().collect())
            .unwrap_or_default()
    }

    /// Whether Deployment `name` (or, with `replica_set`, ReplicaSet `name` without a
    /// Deployment) has condition `type` with `status` (and `reason`); status `Absent`: it has
    /// no such condition.
    pub(crate) fn has_condition(
        &self,
        replica_set: bool,
        name: &str,
        type_: &str,
        status: &str,
        reason: Option<&str>,
    ) -> bool {
        let object = self.object(replica_set, name);
        let c = &object["status"]["conditions"][type_];
        if status == "Absent" {
            return !object.is_null() && c.is_null();
        }
        c["status"] == status && reason.is_none_or(|r| c["reason"] == r)
    }

    /// Deployment `name`, or with `replica_set` ReplicaSet `name` without a Deployment
    /// (`null` if there is none).
    pub(crate) fn object(&self, replica_set: bool, name: &str) -> &Value {
        if replica_set {
            &self.0["replicaSetsWithoutDeployment"][name]
        } else {
            &self.0["deployments"][name]
        }
    }

    /// Adds `events` (every version of every event seen, in any order, repeats allowed) to
    /// their Deployments and ReplicaSets, as a map from `"<type> <reason> from <component>: <message>"` to the
    /// number of occurrences (an event's highest `count` under that message, summed over
    /// events; only which lines appear is compared). An aggregate's message counts as the
    /// message it carries: which messages an event recorder folds into an aggregate is random.
    pub(crate) fn add_events<'a>(
        &mut self,
        events: impl IntoIterator<Item = &'a Value>,
        names: &Names,
    ) {
        // (kind, object, line) -> event uid (or name) -> highest count.
        type Key = (String, String, String);
        let mut counts: BTreeMap<Key, BTreeMap<String, u64>> = BTreeMap::new();
        for e in events {
            let kind = e["involvedObject"]["kind"].as_str().unwrap_or_default();
            if kind != "Deployment" && kind != "ReplicaSet" {
                continue;
            }
            let owner = names.apply(e["involvedObject"]["name"].as_str().unwrap_or_default());
            let from = e["source"]["component"]
                .as_str()
                .filter(|s| !s.is_empty())
                .or_else(|| e["reportingComponent"].as_str())
                .unwrap_or_default();
            let message = e["message"].as_str().unwrap_or_default();
            let message = message.strip_prefix(AGGREGATED).unwrap_or(message);
            let line = names.apply(&format!(
                "{} {} from {from}: {message}",
                e["type"].as_str().unwrap_or_default(),
                e["reason"].as_str().unwrap_or_default(),
            ));
            let id = e["metadata"]["uid"]
                .as_str()
                .or_else(|| e["metadata"]["name"].as_str())
                .unwrap_or_default()
                .to_owned();
            let count = e["count"].as_u64().unwrap_or(1).max(1);
            let highest = counts
                .entry((kind.to_owned(), owner, line))
                .or_default()
                .entry(id)
                .or_default();
            *highest = (*highest).max(count);
        }
        let mut by_object: BTreeMap<(String, String), BTreeMap<String, u64>> = BTreeMap::new();
        for ((kind, owner, line), per_event) in counts {
            by_object
                .entry((kind, owner))
                .or_default()
                .insert(line, per_event.values().sum());
        }
        for ((kind, name), events) in by_object {
            let events = json!(events);
            if kind == "Deployment" {
                if let Some(d) = self.0["deployments"].get_mut(&name) {
                    d["events"] = events;
                } else {
                    self.0["eventsOfDeletedDeployments"][&name] = events;
                }
                continue;
            }
            let owned = self.0["deployments"]
                .as_object_mut()
                .into_iter()
                .flat_map(|ds| ds.values_mut())
                .find_map(|d| d["replicaSets"].get_mut(&name));
            if let Some(rs) = owned {
                rs["events"] = events;
            } else if let Some(rs) = self.0["replicaSetsWithoutDeployment"].get_mut(&name) {
                rs["events"] = events;
            } else {
                self.0["eventsOfDeletedReplicaSets"][&name] = events;
            }
        }
    }

    /// Records a `kubectl rollout <what>` result of Deployment `name`.
    pub(crate) fn add_rollout(&mut self, name: &str, what: &str, output: &str, names: &Names) {
        if let Some(d) = self.0["deployments"].get_mut(name) {
            d[format!("rollout {what}")] = json!(names.apply(output.trim_end()));
        }
    }
}

#[cfg(test)]
mod tests;

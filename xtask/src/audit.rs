//! kube-apiserver audit events (the JSON lines of `--audit-log-format=json`, as written with
//! `kctrl_cluster::audit`), read into [`AuditEvent`]s.

use k8s_openapi::jiff::Timestamp;
use serde::Deserialize;

/// One audit event at its `ResponseComplete` stage (other stages are skipped).
#[derive(Clone, Debug)]
pub(crate) struct AuditEvent {
    /// `verb`: `create`, `update`, `patch`, `delete`, `get`, `list`…
    pub(crate) verb: String,
    /// `userAgent`, empty when absent.
    pub(crate) user_agent: String,
    /// `user.username`, empty when absent.
    pub(crate) username: String,
    /// `objectRef.apiGroup` (empty for the core group).
    pub(crate) group: String,
    /// `objectRef.resource`.
    pub(crate) resource: String,
    /// `objectRef.subresource`, empty when absent.
    pub(crate) subresource: String,
    /// `objectRef.namespace`, empty when absent.
    pub(crate) namespace: String,
    /// `objectRef.name`, empty when absent (a create by `generateName`).
    pub(crate) name: String,
    /// `responseStatus.code`, 0 when absent.
    pub(crate) code: u16,
    /// `requestReceivedTimestamp`: the request reached the apiserver.
    pub(crate) received: Timestamp,
    /// `stageTimestamp`: the answer was complete.
    pub(crate) completed: Timestamp,
    /// `responseObject`, when the policy logged it (level `RequestResponse`).
    pub(crate) response: Option<serde_json::Value>,
}

impl AuditEvent {
    /// Whether the request succeeded (2xx).
    pub(crate) fn succeeded(&self) -> bool {
        (200..300).contains(&self.code)
    }

    /// Whether it changed (or tried to change) something.
    pub(crate) fn is_write(&self) -> bool {
        matches!(
            self.verb.as_str(),
            "create" | "update" | "patch" | "delete" | "deletecollection"
        )
    }

    /// `resource[/subresource] namespace/name`, for messages.
    pub(crate) fn object(&self) -> String {
        let mut r = self.resource.clone();
        if !self.subresource.is_empty() {
            r.push('/');
            r.push_str(&self.subresource);
        }
        format!("{r} {}/{}", self.namespace, self.name)
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Raw {
    stage: Option<String>,
    verb: Option<String>,
    user_agent: Option<String>,
    #[serde(default)]
    user: RawUser,
    #[serde(default)]
    object_ref: RawRef,
    #[serde(default)]
    response_status: RawStatus,
    request_received_timestamp: Option<String>,
    stage_timestamp: Option<String>,
    response_object: Option<serde_json::Value>,
}

#[derive(Default, Deserialize)]
struct RawUser {
    username: Option<String>,
}

#[derive(Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawRef {
    api_group: Option<String>,
    resource: Option<String>,
    subresource: Option<String>,
    namespace: Option<String>,
    name: Option<String>,
}

#[derive(Default, Deserialize)]
struct RawStatus {
    code: Option<u16>,
}

/// The `ResponseComplete` events of `log`, in the order written, and how many non-empty
/// lines could not be read as one.
pub(crate) fn parse(log: &str) -> (Vec<AuditEvent>, usize) {
    let mut events = Vec::new();
    let mut unreadable = 0;
    for line in log.lines().filter(|l| !l.trim().is_empty()) {
        match event(line) {
            Some(Some(e)) => events.push(e),
            Some(None) => {}
            None => unreadable += 1,
        }
    }
    (events, unreadable)
}

/// One line: `None` if unreadable, `Some(None)` for another stage.
fn event(line: &str) -> Option<Option<AuditEvent>> {
    let raw: Raw = serde_json::from_str(line).ok()?;
    if raw.stage.as_deref() != Some("ResponseComplete") {
        return Some(None);
    }
    let time = |t: Option<String>| t?.parse::<Timestamp>().ok();
    let received = time(raw.request_received_timestamp)?;
    let completed = time(raw.stage_timestamp)?;
    let r = raw.object_ref;
    Some(Some(AuditEvent {
        verb: raw.verb.unwrap_or_default(),
        user_agent: raw.user_agent.unwrap_or_default(),
        username: raw.user.username.unwrap_or_default(),
        group: r.api_group.unwrap_or_default(),
        resource: r.resource.unwrap_or_default(),
        subresource: r.subresource.unwrap_or_default(),
        namespace: r.namespace.unwrap_or_default(),
        name: r.name.unwrap_or_default(),
        code: raw.response_status.code.unwrap_or(0),
        received,
        completed,
        response: raw.response_object,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    // A line as kube-apiserver 1.37 writes it (abridged), at Metadata level.
    const UPDATE: &str = r#"{"kind":"Event","apiVersion":"audit.k8s.io/v1","level":"Metadata","auditID":"5d1c","stage":"ResponseComplete","requestURI":"/apis/apps/v1/namespaces/ab3kx-shard/deployments/d001/status","verb":"update","user":{"username":"system:serviceaccount:kube-system:kctrl-deployment-controller","groups":["system:serviceaccounts"]},"sourceIPs":["127.0.0.1"],"userAgent":"deployment-controller/0.1.0 (shard host-1234)","objectRef":{"resource":"deployments","namespace":"ab3kx-shard","name":"d001","apiGroup":"apps","apiVersion":"v1","subresource":"status"},"responseStatus":{"metadata":{},"code":200},"requestReceivedTimestamp":"2026-11-29T10:00:00.100000Z","stageTimestamp":"2026-11-29T10:00:00.104321Z","annotations":{"authorization.k8s.io/decision":"allow"}}"#;

    #[test]
    fn events_are_read_with_their_object_and_times() {
        let lease = r#"{"stage":"ResponseComplete","verb":"update","userAgent":"x","objectRef":{"resource":"leases","namespace":"kube-system","name":"g-a","apiGroup":"coordination.k8s.io"},"responseStatus":{"code":200},"requestReceivedTimestamp":"2026-11-29T10:00:01Z","stageTimestamp":"2026-11-29T10:00:01.5Z","responseObject":{"metadata":{"name":"g-a","resourceVersion":"7"}}}"#;
        let other_stage = r#"{"stage":"RequestReceived","verb":"get"}"#;
        let log = format!("{UPDATE}\n{other_stage}\nnot json\n\n{lease}\n");
        let (events, unreadable) = parse(&log);
        assert_eq!(unreadable, 1);
        assert_eq!(events.len(), 2);
        let e = &events[0];
        assert_eq!(e.verb, "update");
        assert_eq!(e.object(), "deployments/status ab3kx-shard/d001");
        assert_eq!(e.group, "apps");
        assert_eq!(
            e.user_agent,
            "deployment-controller/0.1.0 (shard host-1234)"
        );
        assert!(e.username.ends_with("kctrl-deployment-controller"));
        assert!(e.succeeded() && e.is_write());
        assert_eq!(
            e.completed.as_microsecond() - e.received.as_microsecond(),
            4321
        );
        assert!(e.response.is_none());
        let l = &events[1];
        assert_eq!(
            l.response.as_ref().unwrap()["metadata"]["resourceVersion"],
            "7"
        );
        assert!(l.received < l.completed);
    }
}

//! kube-apiserver audit events (the JSON lines of `--audit-log-format=json`, as written with
//! `kctrl_cluster::audit`), read into [`AuditEvent`]s with their objects, user agents and
//! timestamps (for checks of who wrote what when; [`crate::parse::tally_audit`] counts).

pub use jiff::Timestamp;
use serde_json::Value;

/// One audit event at its `ResponseComplete` stage (other stages are skipped).
#[derive(Clone, Debug)]
pub struct AuditEvent {
    /// `verb`: `create`, `update`, `patch`, `delete`, `get`, `list`…
    pub verb: String,
    /// `userAgent`, empty when absent.
    pub user_agent: String,
    /// `user.username`, empty when absent.
    pub username: String,
    /// `objectRef.apiGroup` (empty for the core group).
    pub group: String,
    /// `objectRef.resource`.
    pub resource: String,
    /// `objectRef.subresource`, empty when absent.
    pub subresource: String,
    /// `objectRef.namespace`, empty when absent.
    pub namespace: String,
    /// `objectRef.name`, empty when absent (a create by `generateName`).
    pub name: String,
    /// `responseStatus.code`, 0 when absent.
    pub code: u16,
    /// `requestReceivedTimestamp`: the request reached the apiserver.
    pub received: Timestamp,
    /// `stageTimestamp`: the answer was complete.
    pub completed: Timestamp,
    /// `responseObject`, when the policy logged it (level `RequestResponse`).
    pub response: Option<serde_json::Value>,
}

impl AuditEvent {
    /// Whether the request succeeded (2xx).
    pub fn succeeded(&self) -> bool {
        (200..300).contains(&self.code)
    }

    /// Whether it changed (or tried to change) something.
    pub fn is_write(&self) -> bool {
        matches!(
            self.verb.as_str(),
            "create" | "update" | "patch" | "delete" | "deletecollection"
        )
    }

    /// `resource[/subresource] namespace/name`, for messages.
    pub fn object(&self) -> String {
        let mut r = self.resource.clone();
        if !self.subresource.is_empty() {
            r.push('/');
            r.push_str(&self.subresource);
        }
        format!("{r} {}/{}", self.namespace, self.name)
    }
}

/// The `ResponseComplete` events of `log`, in the order written, and how many non-empty
/// lines could not be read as one.
pub fn parse(log: &str) -> (Vec<AuditEvent>, usize) {
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
    let mut raw: Value = serde_json::from_str(line).ok()?;
    if !raw.is_object() {
        return None;
    }
    if raw["stage"].as_str() != Some("ResponseComplete") {
        return Some(None);
    }
    let text = |v: &Value| v.as_str().unwrap_or_default().to_owned();
    let time = |v: &Value| v.as_str()?.parse::<Timestamp>().ok();
    let received = time(&raw["requestReceivedTimestamp"])?;
    let completed = time(&raw["stageTimestamp"])?;
    let response = match raw["responseObject"].take() {
        Value::Null => None,
        body => Some(body),
    };
    let r = &raw["objectRef"];
    Some(Some(AuditEvent {
        verb: text(&raw["verb"]),
        user_agent: text(&raw["userAgent"]),
        username: text(&raw["user"]["username"]),
        group: text(&r["apiGroup"]),
        resource: text(&r["resource"]),
        subresource: text(&r["subresource"]),
        namespace: text(&r["namespace"]),
        name: text(&r["name"]),
        code: raw["responseStatus"]["code"]
            .as_u64()
            .and_then(|c| u16::try_from(c).ok())
            .unwrap_or(0),
        received,
        completed,
        response,
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

//! The leader election record: who holds the lock, for how long, and since when — and its
//! mapping onto a `coordination.k8s.io/v1` [`LeaseSpec`].
//!
//! The elector never trusts the timestamps in a record to judge whether a lease is still
//! valid (clocks differ between machines); it only compares [`LeaderElectionRecord::raw`]
//! bytes to notice that the record changed, and times that change with its own clock.

use k8s_openapi::api::coordination::v1::LeaseSpec;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff::Timestamp;
use serde_json::{Value, json};

/// What a lock stores about the current leader (client-go's `LeaderElectionRecord`).
///
/// An empty [`holder_identity`](Self::holder_identity) means nobody holds the lock (it was
/// released, or never taken).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LeaderElectionRecord {
    /// The identity of the holder; empty when unheld.
    pub holder_identity: String,
    /// How long, in seconds, other candidates must wait after seeing the record last change
    /// before they may take the lock over.
    pub lease_duration_seconds: i32,
    /// When the current holder acquired the lock.
    pub acquire_time: Option<Timestamp>,
    /// When the current holder last renewed the lock.
    pub renew_time: Option<Timestamp>,
    /// How many times the lock changed hands.
    pub leader_transitions: i32,
    /// The coordinated leader election strategy (`spec.strategy`); empty when unset.
    pub strategy: String,
    /// The candidate the coordinated election prefers (`spec.preferredHolder`); empty when
    /// unset.
    pub preferred_holder: String,
}

impl LeaderElectionRecord {
    /// The record's canonical JSON (field names as client-go's, times with second
    /// precision, absent times `null`). Locks return these bytes from
    /// [`ResourceLock::get`](crate::ResourceLock::get) so the elector can tell whether the
    /// record changed since it last looked.
    pub fn raw(&self) -> Vec<u8> {
        fn time(t: Option<Timestamp>) -> Value {
            t.and_then(|t| Timestamp::from_second(t.as_second()).ok())
                .map_or(Value::Null, |t| Value::String(t.to_string()))
        }
        let v = json!({
            "holderIdentity": self.holder_identity,
            "leaseDurationSeconds": self.lease_duration_seconds,
            "acquireTime": time(self.acquire_time),
            "renewTime": time(self.renew_time),
            "leaderTransitions": self.leader_transitions,
            "strategy": self.strategy,
            "preferredHolder": self.preferred_holder,
        });
        // Serializing a `Value` built from strings and integers cannot fail.
        serde_json::to_vec(&v).unwrap_or_default()
    }

    /// The record read from a Lease's spec; absent fields become empty or zero.
    pub fn from_lease_spec(spec: &LeaseSpec) -> Self {
        Self {
            holder_identity: spec.holder_identity.clone().unwrap_or_default(),
            lease_duration_seconds: spec.lease_duration_seconds.unwrap_or_default(),
            acquire_time: spec.acquire_time.as_ref().map(|t| t.0),
            renew_time: spec.renew_time.as_ref().map(|t| t.0),
            leader_transitions: spec.lease_transitions.unwrap_or_default(),
            strategy: spec.strategy.clone().unwrap_or_default(),
            preferred_holder: spec.preferred_holder.clone().unwrap_or_default(),
        }
    }

    /// The Lease spec storing this record. Holder, duration and transitions are always
    /// written; strategy and preferred holder only when set.
    pub fn to_lease_spec(&self) -> LeaseSpec {
        LeaseSpec {
            holder_identity: Some(self.holder_identity.clone()),
            lease_duration_seconds: Some(self.lease_duration_seconds),
            acquire_time: self.acquire_time.map(MicroTime),
            renew_time: self.renew_time.map(MicroTime),
            lease_transitions: Some(self.leader_transitions),
            strategy: (!self.strategy.is_empty()).then(|| self.strategy.clone()),
            preferred_holder: (!self.preferred_holder.is_empty())
                .then(|| self.preferred_holder.clone()),
        }
    }
}

/// `t` at the precision a Lease stores (`MicroTime`: microseconds), so a record written and
/// read back compares equal.
pub(crate) fn to_micros(t: Timestamp) -> Timestamp {
    Timestamp::from_microsecond(t.as_microsecond()).unwrap_or(t)
}

impl From<&LeaseSpec> for LeaderElectionRecord {
    fn from(spec: &LeaseSpec) -> Self {
        Self::from_lease_spec(spec)
    }
}

impl From<&LeaderElectionRecord> for LeaseSpec {
    fn from(record: &LeaderElectionRecord) -> Self {
        record.to_lease_spec()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: &str) -> Timestamp {
        s.parse().expect("a valid timestamp")
    }

    // client-go: TestLeaseSpecToLeaderElectionRecordRoundTrip
    #[test]
    fn lease_spec_round_trips_through_the_record() {
        let old_spec = LeaseSpec {
            holder_identity: Some("foo".into()),
            lease_duration_seconds: Some(10),
            acquire_time: Some(MicroTime(at("2026-11-21T10:00:00.123456Z"))),
            renew_time: Some(MicroTime(at("2026-11-21T10:00:05.654321Z"))),
            lease_transitions: Some(1),
            ..Default::default()
        };
        let old_record = LeaderElectionRecord::from(&old_spec);
        let new_spec = LeaseSpec::from(&old_record);
        assert_eq!(old_spec, new_spec);
        assert_eq!(old_record, LeaderElectionRecord::from(&new_spec));
    }

    // client-go resourcelock: TestLeaseConversion
    #[test]
    fn every_field_survives_the_conversion() {
        let record = LeaderElectionRecord {
            holder_identity: "test-identity".into(),
            lease_duration_seconds: 15,
            acquire_time: Some(at("2026-11-21T10:00:00.5Z")),
            renew_time: Some(at("2026-11-21T10:00:07.25Z")),
            leader_transitions: 1,
            strategy: "strategy".into(),
            preferred_holder: "preferred-holder".into(),
        };
        let spec = record.to_lease_spec();
        assert_eq!(spec.holder_identity.as_deref(), Some("test-identity"));
        assert_eq!(spec.lease_duration_seconds, Some(15));
        assert_eq!(
            spec.acquire_time,
            Some(MicroTime(at("2026-11-21T10:00:00.5Z")))
        );
        assert_eq!(
            spec.renew_time,
            Some(MicroTime(at("2026-11-21T10:00:07.25Z")))
        );
        assert_eq!(spec.lease_transitions, Some(1));
        assert_eq!(spec.preferred_holder.as_deref(), Some("preferred-holder"));
        assert_eq!(spec.strategy.as_deref(), Some("strategy"));
        assert_eq!(LeaderElectionRecord::from_lease_spec(&spec), record);
    }

    #[test]
    fn empty_spec_is_an_unheld_record() {
        let record = LeaderElectionRecord::from_lease_spec(&LeaseSpec::default());
        assert_eq!(record, LeaderElectionRecord::default());
        let spec = record.to_lease_spec();
        assert_eq!(spec.holder_identity.as_deref(), Some(""));
        assert_eq!(spec.strategy, None);
        assert_eq!(spec.preferred_holder, None);
        assert_eq!(spec.acquire_time, None);
    }

    #[test]
    fn raw_bytes_use_client_go_field_names_and_second_precision() {
        let record = LeaderElectionRecord {
            holder_identity: "a".into(),
            lease_duration_seconds: 15,
            acquire_time: Some(at("2026-11-21T10:00:00.9Z")),
            renew_time: None,
            leader_transitions: 2,
            ..Default::default()
        };
        let v: Value = serde_json::from_slice(&record.raw()).expect("raw is JSON");
        assert_eq!(
            v,
            json!({
                "holderIdentity": "a",
                "leaseDurationSeconds": 15,
                "acquireTime": "2026-11-21T10:00:00Z",
                "renewTime": null,
                "leaderTransitions": 2,
                "strategy": "",
                "preferredHolder": "",
            })
        );
        // A renewal within the same second does not change the bytes; another holder does.
        let mut same_second = record.clone();
        same_second.acquire_time = Some(at("2026-11-21T10:00:00.1Z"));
        assert_eq!(record.raw(), same_second.raw());
        let mut other = record.clone();
        other.holder_identity = "b".into();
        assert_ne!(record.raw(), other.raw());
    }
}

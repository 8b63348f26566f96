//! `metadata.managedFields`: which manager owns which fields, read from and written to the
//! stored JSON of an object.
//!
//! An entry is identified as the apiserver identifies it: by manager name, operation
//! (`Apply` or `Update`) and subresource, and for `Update` entries also by API version.

use serde_json::{Map, Value, json};

use crate::fields::{self, FieldSet};

/// How a manager came to own its fields.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Operation {
    /// Server-side apply: the manager owns exactly what it applied last.
    Apply,
    /// Create, update or a non-apply patch: the manager owns what it changed.
    Update,
}

impl Operation {
    fn as_str(self) -> &'static str {
        match self {
            Operation::Apply => "Apply",
            Operation::Update => "Update",
        }
    }
}

/// One entry of `metadata.managedFields`.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Manager {
    pub(crate) manager: String,
    pub(crate) operation: Operation,
    pub(crate) api_version: String,
    /// `status`, or empty for the main resource.
    pub(crate) subresource: String,
    /// When the manager last changed the object (RFC 3339, seconds); an applier whose
    /// apply changed nothing has none.
    pub(crate) time: Option<String>,
    pub(crate) fields: FieldSet,
}

impl Manager {
    /// A new entry owning nothing yet.
    pub(crate) fn new(
        manager: &str,
        operation: Operation,
        api_version: &str,
        subresource: &str,
    ) -> Self {
        Self {
            manager: manager.to_owned(),
            operation,
            api_version: api_version.to_owned(),
            subresource: subresource.to_owned(),
            time: None,
            fields: FieldSet::new(),
        }
    }

    /// Whether `other` is the same manager in the apiserver's sense.
    pub(crate) fn same_as(&self, other: &Manager) -> bool {
        self.manager == other.manager
            && self.operation == other.operation
            && self.subresource == other.subresource
            && (self.operation == Operation::Apply || self.api_version == other.api_version)
    }

    /// How conflict messages name the manager: `"kubectl"`, `"m" with subresource
    /// "status"`, `"kube-controller-manager" using apps/v1`.
    pub(crate) fn describe(&self) -> String {
        let mut s = format!("{:?}", self.manager);
        if !self.subresource.is_empty() {
            s.push_str(&format!(" with subresource {:?}", self.subresource));
        }
        if self.operation == Operation::Update {
            s.push_str(&format!(" using {}", self.api_version));
        }
        s
    }

    /// The apiserver's identifier of the manager (the JSON it sorts conflicts by): manager,
    /// operation, the API version of an updater, subresource, in that order.
    pub(crate) fn identifier(&self) -> String {
        let text = |s: &str| Value::from(s).to_string();
        let mut parts = vec![
            format!("\"manager\":{}", text(&self.manager)),
            format!("\"operation\":{}", text(self.operation.as_str())),
        ];
        if self.operation == Operation::Update && !self.api_version.is_empty() {
            parts.push(format!("\"apiVersion\":{}", text(&self.api_version)));
        }
        if !self.subresource.is_empty() {
            parts.push(format!("\"subresource\":{}", text(&self.subresource)));
        }
        format!("{{{}}}", parts.join(","))
    }

    fn to_json(&self) -> Value {
        let mut entry = json!({
            "manager": self.manager,
            "operation": self.operation.as_str(),
            "apiVersion": self.api_version,
            "fieldsType": "FieldsV1",
            "fieldsV1": fields::to_fields_v1(&self.fields),
        });
        if let Some(time) = &self.time {
            entry["time"] = time.clone().into();
        }
        if !self.subresource.is_empty() {
            entry["subresource"] = self.subresource.clone().into();
        }
        entry
    }

    fn from_json(entry: &Value) -> Result<Self, String> {
        let text = |field: &str| entry.get(field).and_then(Value::as_str).unwrap_or("");
        let operation = match text("operation") {
            "Apply" => Operation::Apply,
            "Update" => Operation::Update,
            other => return Err(format!("unknown operation {other:?}")),
        };
        if text("fieldsType") != "FieldsV1" {
            return Err(format!(
                "fieldsType {:?} is not supported (FieldsV1 is)",
                text("fieldsType")
            ));
        }
        let fields = match entry.get("fieldsV1") {
            Some(tree) => fields::from_fields_v1(tree)?,
            None => FieldSet::new(),
        };
        Ok(Self {
            manager: text("manager").to_owned(),
            operation,
            api_version: text("apiVersion").to_owned(),
            subresource: text("subresource").to_owned(),
            time: entry.get("time").and_then(Value::as_str).map(str::to_owned),
            fields,
        })
    }
}

/// The managers recorded in `obj`, empty when it has none (an object whose changes are not
/// tracked).
pub(crate) fn read(obj: &Value) -> Result<Vec<Manager>, String> {
    match obj.pointer("/metadata/managedFields") {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::Array(entries)) => entries
            .iter()
            .enumerate()
            .map(|(i, e)| Manager::from_json(e).map_err(|why| format!("managedFields[{i}]: {why}")))
            .collect(),
        Some(_) => Err("managedFields is not a list".to_owned()),
    }
}

/// Whether `obj` asks to stop tracking managers: `managedFields` set to a list of empty
/// entries (`[{}]`), the documented way to clear them (an empty list means "unchanged").
pub(crate) fn is_reset(obj: &Value) -> bool {
    matches!(
        obj.pointer("/metadata/managedFields"),
        Some(Value::Array(entries))
            if !entries.is_empty()
                && entries.iter().all(|e| e.as_object().is_some_and(Map::is_empty))
    )
}

/// The entries in the apiserver's order: appliers first, then by time, manager, API
/// version and subresource.
pub(crate) fn to_json(managers: &[Manager]) -> Value {
    let mut sorted: Vec<&Manager> = managers.iter().collect();
    sorted.sort_by(|a, b| {
        a.operation
            .cmp(&b.operation)
            .then_with(|| a.time.cmp(&b.time))
            .then_with(|| a.manager.cmp(&b.manager))
            .then_with(|| a.api_version.cmp(&b.api_version))
            .then_with(|| a.subresource.cmp(&b.subresource))
    });
    Value::Array(sorted.into_iter().map(Manager::to_json).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_round_trip_and_sort() {
        let recorded = json!([
            {"manager": "m2", "operation": "Apply", "apiVersion": "v1", "fieldsType": "FieldsV1",
             "fieldsV1": {"f:data": {"f:x": {}}}},
            {"manager": "m1", "operation": "Apply", "apiVersion": "v1", "time": "2026-11-28T06:12:13Z",
             "fieldsType": "FieldsV1", "fieldsV1": {"f:data": {"f:x": {}, "f:y": {}}}},
            {"manager": "s", "operation": "Update", "apiVersion": "apps/v1",
             "time": "2026-11-28T06:12:10Z", "fieldsType": "FieldsV1",
             "fieldsV1": {"f:status": {"f:replicas": {}}}, "subresource": "status"},
        ]);
        let obj = json!({"metadata": {"managedFields": recorded}});
        let managers = read(&obj).unwrap();
        assert_eq!(managers.len(), 3);
        assert_eq!(managers[2].subresource, "status");
        // Reversed, they sort back into the apiserver's order.
        let reversed: Vec<Manager> = managers.iter().rev().cloned().collect();
        assert_eq!(to_json(&reversed), obj["metadata"]["managedFields"]);
        assert_eq!(
            managers[2].describe(),
            r#""s" with subresource "status" using apps/v1"#
        );
        assert_eq!(managers[0].describe(), r#""m2""#);
        assert_eq!(
            managers[2].identifier(),
            r#"{"manager":"s","operation":"Update","apiVersion":"apps/v1","subresource":"status"}"#
        );
        let bad = json!({"metadata": {"managedFields": [{"operation": "Patch"}]}});
        assert!(read(&bad).unwrap_err().contains("managedFields[0]"));
    }

    #[test]
    fn identity_ignores_the_api_version_of_appliers() {
        let a = Manager::new("m", Operation::Apply, "v1", "");
        assert!(a.same_as(&Manager::new("m", Operation::Apply, "v2", "")));
        assert!(!a.same_as(&Manager::new("m", Operation::Apply, "v1", "status")));
        let u = Manager::new("m", Operation::Update, "v1", "");
        assert!(!u.same_as(&Manager::new("m", Operation::Update, "v2", "")));
        assert!(!u.same_as(&a));
    }

    #[test]
    fn a_list_of_empty_entries_resets() {
        assert!(is_reset(&json!({"metadata": {"managedFields": [{}]}})));
        assert!(!is_reset(&json!({"metadata": {"managedFields": []}})));
        assert!(!is_reset(&json!({"metadata": {}})));
    }
}

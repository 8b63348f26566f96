//! Label and field selectors applied to stored JSON objects.

use std::collections::BTreeMap;

use kctrl_client::Error;
use kctrl_client::labels::Selector;
use serde_json::Value;

use crate::errors;
use crate::registry::ResourceSpec;

#[derive(Clone, Debug, PartialEq, Eq)]
struct FieldRequirement {
    field: String,
    equals: bool,
    value: String,
}

/// The label and field selectors of one list or watch.
#[derive(Clone, Debug, Default)]
pub(crate) struct Filter {
    labels: Option<Selector>,
    fields: Vec<FieldRequirement>,
}

impl Filter {
    pub(crate) fn parse(
        spec: &ResourceSpec,
        labels: Option<&str>,
        fields: Option<&str>,
    ) -> Result<Self, Error> {
        let labels = match labels.map(str::trim).filter(|s| !s.is_empty()) {
            None => None,
            Some(text) => {
                Some(Selector::parse(text).map_err(|e| errors::bad_request(e.to_string()))?)
            }
        };
        let mut reqs = Vec::new();
        if let Some(text) = fields.map(str::trim).filter(|s| !s.is_empty()) {
            for term in split_unescaped(text, ',') {
                let (field, equals, value) = if let Some((f, v)) = term.split_once("!=") {
                    (f, false, v)
                } else if let Some((f, v)) = term.split_once("==") {
                    (f, true, v)
                } else if let Some((f, v)) = term.split_once('=') {
                    (f, true, v)
                } else {
                    return Err(errors::bad_request(format!(
                        "invalid field selector: {term:?}: expected one of =, ==, !="
                    )));
                };
                let field = field.trim();
                let supported = field == "metadata.name"
                    || (field == "metadata.namespace" && spec.resource.is_namespaced())
                    || spec.field_labels.iter().any(|l| l == field);
                if !supported {
                    return Err(errors::bad_request(format!(
                        "field label not supported: {field}"
                    )));
                }
                reqs.push(FieldRequirement {
                    field: field.to_owned(),
                    equals,
                    value: unescape(value.trim()),
                });
            }
        }
        Ok(Self {
            labels,
            fields: reqs,
        })
    }

    /// Whether the selectors have no requirement.
    pub(crate) fn is_empty(&self) -> bool {
        self.labels.as_ref().is_none_or(Selector::is_everything) && self.fields.is_empty()
    }

    pub(crate) fn matches(&self, obj: &Value) -> bool {
        if let Some(sel) = &self.labels {
            let mut labels = BTreeMap::new();
            if let Some(Value::Object(m)) = obj.pointer("/metadata/labels") {
                for (k, v) in m {
                    if let Some(s) = v.as_str() {
                        labels.insert(k.clone(), s.to_owned());
                    }
                }
            }
            if !sel.matches(&labels) {
                return false;
            }
        }
        self.fields.iter().all(|r| {
            let actual = field_value(obj, &r.field);
            (actual == r.value) == r.equals
        })
    }
}

/// The value of a field label: the dotted JSON path rendered as a string, "" when absent.
fn field_value(obj: &Value, field: &str) -> String {
    let mut cur = obj;
    for part in field.split('.') {
        match cur.get(part) {
            Some(v) => cur = v,
            None => return String::new(),
        }
    }
    match cur {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

fn split_unescaped(text: &str, sep: char) -> Vec<&str> {
    let mut out = Vec::new();
    let mut start = 0;
    let mut escaped = false;
    for (i, c) in text.char_indices() {
        if escaped {
            escaped = false;
        } else if c == '\\' {
            escaped = true;
        } else if c == sep {
            out.push(&text[start..i]);
            start = i + 1;
        }
    }
    out.push(&text[start..]);
    out
}

fn unescape(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    let mut chars = value.chars();
    while let Some(c) = chars.next() {
        if c == '\\' {
            if let Some(n) = chars.next() {
                out.push(n);
            }
        } else {
            out.push(c);
        }
    }
    out
}

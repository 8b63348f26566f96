//! CEL validation rules (`x-kubernetes-validations`) written as attributes on the Rust types.
//!
//! A [`Rule`] is a schemars transform: `#[schemars(transform = rule!("self.min <= self.max"))]`
//! on a struct, an enum or a field puts the rule on that node, wherever the type is used
//! (the spec's own fields, nested types, list items, map values): schemars' schema holds it
//! under a key of its own (`x-kctrl-rule-...`), which the structural conversion turns into
//! the node's `x-kubernetes-validations` (after any written there by hand).
//! [`rule!`](crate::rule) builds it in a `const` block, so what can be checked before the API
//! server sees it is a compile error; [`Rule::new`] builds one at run time, and the schema
//! conversion reports the same mistakes then ([`Relaxed`](super::Relaxed), refused by
//! [`try_crd`](super::CustomResourceExt::try_crd)).

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::ValidationRule;
use serde_json::{Map, Value};

/// The key under which a schema node keeps its rules.
pub(super) const VALIDATIONS: &str = "x-kubernetes-validations";

/// The start of the key under which a [`Rule`] writes itself on a schemars node (see its
/// `Transform`); the schema conversion gathers them into [`VALIDATIONS`].
pub(super) const RULE_KEY_PREFIX: &str = "x-kctrl-rule-";

/// The reason the API server gives a client when a rule fails (the `reason` of the
/// `Status` cause, and the word in the message: `Invalid value`, `Forbidden`...).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Reason {
    /// `Invalid value` (HTTP 422; the default of a rule without a reason).
    FieldValueInvalid,
    /// `Forbidden`.
    FieldValueForbidden,
    /// `Required value`.
    FieldValueRequired,
    /// `Duplicate value`.
    FieldValueDuplicate,
}

impl Reason {
    /// The reason as a rule writes it: `FieldValueInvalid`, ...
    pub const fn as_str(self) -> &'static str {
        match self {
            Reason::FieldValueInvalid => "FieldValueInvalid",
            Reason::FieldValueForbidden => "FieldValueForbidden",
            Reason::FieldValueRequired => "FieldValueRequired",
            Reason::FieldValueDuplicate => "FieldValueDuplicate",
        }
    }

    /// The reason named `s`, if it is one of the four the API server accepts.
    pub fn parse(s: &str) -> Option<Self> {
        [
            Reason::FieldValueInvalid,
            Reason::FieldValueForbidden,
            Reason::FieldValueRequired,
            Reason::FieldValueDuplicate,
        ]
        .into_iter()
        .find(|r| r.as_str() == s)
    }
}

/// One CEL validation rule of a schema node, and a schemars transform that adds it there.
///
/// In the rule, `self` is the value of the node the rule is on (the struct, the field);
/// `oldSelf` the value before an update, which makes it a *transition rule*: checked on
/// updates only, and only where the old value can be found (not inside an atomic list).
/// Build it with [`rule!`](crate::rule) to have it checked at compile time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rule {
    rule: &'static str,
    message: Option<&'static str>,
    message_expression: Option<&'static str>,
    reason: Option<Reason>,
    field_path: Option<&'static str>,
    optional_old_self: Option<bool>,
}

impl Rule {
    /// A rule with the CEL expression `rule`, which must evaluate to `true` for a valid value.
    pub const fn new(rule: &'static str) -> Self {
        Self {
            rule,
            message: None,
            message_expression: None,
            reason: None,
            field_path: None,
            optional_old_self: None,
        }
    }

    /// The message a client gets when the rule fails (default: `failed rule: <rule>`); one line.
    pub const fn message(mut self, message: &'static str) -> Self {
        self.message = Some(message);
        self
    }

    /// A CEL expression giving the message (a string), e.g.
    /// `"'%d replicas are more than %d'.format([self.replicas, self.max])"`; it wins over
    /// [`message`](Self::message), which is still used should the expression fail. Prefer
    /// `format` to `+ string(x)`: kube-apiserver costs a `string()` conversion as a string of
    /// any size, over its budget (see the `crd` module docs).
    pub const fn message_expression(mut self, expression: &'static str) -> Self {
        self.message_expression = Some(expression);
        self
    }

    /// The reason reported when the rule fails (default [`Reason::FieldValueInvalid`]).
    pub const fn reason(mut self, reason: Reason) -> Self {
        self.reason = Some(reason);
        self
    }

    /// The field the failure is reported at, relative to the node, e.g. `.max`, or
    /// `['max.surge']` for a name a dot cannot follow (default: the node itself).
    pub const fn field_path(mut self, path: &'static str) -> Self {
        self.field_path = Some(path);
        self
    }

    /// For a transition rule: also evaluate it when there is no old value (a create, or a
    /// field being set), with `oldSelf` an optional (`oldSelf.hasValue()`, `oldSelf.value()`).
    /// Only on a rule using `oldSelf`: the API server refuses it elsewhere, `false` too.
    pub const fn optional_old_self(mut self, optional: bool) -> Self {
        self.optional_old_self = Some(optional);
        self
    }

    /// The CEL expression.
    pub const fn rule(&self) -> &'static str {
        self.rule
    }

    /// What the API server would refuse in this rule for its form alone (not its CEL,
    /// which only the API server compiles), or `None`.
    pub const fn problem(&self) -> Option<&'static str> {
        form_problem(
            self.rule,
            self.message,
            self.message_expression,
            self.field_path,
            self.optional_old_self,
        )
    }

    /// The rule itself, failing (a compile error in a `const` context, as in
    /// [`rule!`](crate::rule)) when it has a [`problem`](Self::problem).
    ///
    /// # Panics
    ///
    /// When it has a problem; in a `const` context that is a compile error naming it.
    pub const fn checked(self) -> Self {
        if let Some(problem) = self.problem() {
            panic!("{}", problem);
        }
        self
    }

    /// The rule as the CustomResourceDefinition holds it.
    pub fn to_validation_rule(&self) -> ValidationRule {
        ValidationRule {
            rule: self.rule.to_owned(),
            message: self.message.map(str::to_owned),
            message_expression: self.message_expression.map(str::to_owned),
            reason: self.reason.map(|r| r.as_str().to_owned()),
            field_path: self.field_path.map(str::to_owned),
            optional_old_self: self.optional_old_self,
        }
    }

    fn to_value(self) -> Value {
        let mut m = Map::new();
        m.insert("rule".to_owned(), Value::from(self.rule));
        let mut opt = |k: &str, v: Option<&str>| {
            if let Some(v) = v {
                m.insert(k.to_owned(), Value::from(v));
            }
        };
        opt("message", self.message);
        opt("messageExpression", self.message_expression);
        opt("reason", self.reason.map(Reason::as_str));
        opt("fieldPath", self.field_path);
        if let Some(o) = self.optional_old_self {
            m.insert("optionalOldSelf".to_owned(), Value::Bool(o));
        }
        Value::Object(m)
    }
}

impl schemars::transform::Transform for Rule {
    /// Writes the rule on the node under a key of its own, `x-kctrl-rule-<n>-<hash>` (the
    /// node's `n`-th rule, the hash of its text), with the node's `required` list as it is
    /// now; the schema conversion gathers these keys into `x-kubernetes-validations`.
    ///
    /// Not `x-kubernetes-validations` itself: schemars' `#[serde(flatten)]` keeps only the
    /// first flattened struct's value of a key the parent already has, so the rules of a
    /// second flattened struct would vanish; keys of their own all survive. The `required`
    /// list tells the conversion whether the fields the rule was written for are still
    /// required where it lands (not so when flattened from an `Option`).
    fn transform(&mut self, schema: &mut schemars::Schema) {
        let node = schema.ensure_object();
        let n = node
            .keys()
            .filter(|k| k.starts_with(RULE_KEY_PREFIX))
            .count();
        let rule = self.to_value();
        let key = rule_key(n, &rule);
        let required = node
            .get("required")
            .cloned()
            .unwrap_or_else(|| Value::Array(Vec::new()));
        let mut entry = Map::new();
        entry.insert("rule".to_owned(), rule);
        entry.insert("required".to_owned(), required);
        node.insert(key, Value::Object(entry));
    }
}

/// The key of a node's `n`-th rule: `x-kctrl-rule-<n, 6 digits>-<FNV-1a 64 of its JSON>`. The
/// digits keep a node's rules in their order (a map is ordered by key) up to a million rules;
/// the hash is a fixed function of the text, so a generated CRD does not change with the Rust
/// release (std's `DefaultHasher` promises no such thing), and rules at the same position of
/// two flattened structs get distinct keys, ordered by their text.
fn rule_key(n: usize, rule: &Value) -> String {
    let hash = crate::sharding::hash_field(&rule.to_string());
    format!("{RULE_KEY_PREFIX}{n:06}-{hash:016x}")
}

/// What is wrong with one entry of an `x-kubernetes-validations` list as written in a schema
/// (by a [`Rule`] or by `#[schemars(extend(...))]`), or `None`.
pub(super) fn entry_problem(v: &Value) -> Option<String> {
    let Value::Object(o) = v else {
        return Some(format!("a validation rule must be an object, not {v}"));
    };
    let s = |k: &str| o.get(k).and_then(Value::as_str);
    for (k, val) in o {
        let known = matches!(
            k.as_str(),
            "rule" | "message" | "messageExpression" | "reason" | "fieldPath" | "optionalOldSelf"
        );
        if !known {
            return Some(format!("a validation rule has no key `{k}`"));
        }
        let type_ok = if k == "optionalOldSelf" {
            val.is_boolean()
        } else {
            val.is_string()
        };
        if !type_ok {
            return Some(format!(
                "the `{k}` of a validation rule has the wrong type ({val})"
            ));
        }
    }
    let Some(rule) = s("rule") else {
        return Some("a validation rule needs a `rule` (its CEL expression)".to_owned());
    };
    if let Some(reason) = s("reason")
        && Reason::parse(reason).is_none()
    {
        return Some(format!(
            "unknown reason `{reason}` in rule `{rule}`: FieldValueInvalid, FieldValueForbidden, \
             FieldValueRequired or FieldValueDuplicate"
        ));
    }
    let problem = form_problem(
        rule,
        s("message"),
        s("messageExpression"),
        s("fieldPath"),
        o.get("optionalOldSelf").and_then(Value::as_bool),
    );
    problem.map(|p| format!("{p} (rule `{rule}`)"))
}

/// [`Rule::problem`] for text that is not `'static`. As the API server, it judges the rule,
/// the message and the messageExpression with the whitespace around them trimmed (Go's
/// `strings.TrimSpace`: Unicode white space), so a trailing line break is no line break.
const fn form_problem(
    rule: &str,
    message: Option<&str>,
    message_expression: Option<&str>,
    field_path: Option<&str>,
    optional_old_self: Option<bool>,
) -> Option<&'static str> {
    let rule = trimmed(rule);
    if rule.0 == rule.1 {
        return Some("a CEL validation rule must not be empty");
    }
    let message = match message {
        Some(m) => Some(trimmed(m)),
        None => None,
    };
    match message {
        Some((start, end, _)) if start == end => {
            return Some("a rule's message must not be empty: leave it out instead");
        }
        Some(m) if has_line_break(m) => return Some("a rule's message must be one line"),
        None if has_line_break(rule) => {
            return Some("a rule written over several lines needs a message");
        }
        _ => {}
    }
    if let Some(e) = message_expression {
        let (start, end, _) = trimmed(e);
        if start == end {
            return Some("a rule's messageExpression must not be empty: leave it out instead");
        }
    }
    if let Some(p) = field_path {
        let b = p.as_bytes();
        if b.is_empty() || (b[0] != b'.' && b[0] != b'[') {
            return Some(
                "a rule's fieldPath is a path relative to the node that starts with a dot or a \
                 bracket, e.g. `.max` or `['max']`",
            );
        }
        if has_line_break((0, b.len(), b)) {
            return Some("a rule's fieldPath must be one line");
        }
    }
    // The API server refuses optionalOldSelf, true or false, on a rule without oldSelf.
    if optional_old_self.is_some() && !contains(rule, b"oldSelf") {
        return Some("optionalOldSelf is only for transition rules: the rule must use oldSelf");
    }
    None
}

/// The bytes of `s` from `.0` to `.1`, Unicode white space trimmed at both ends, and `s`.
const fn trimmed(s: &str) -> (usize, usize, &[u8]) {
    let b = s.as_bytes();
    let mut start = 0;
    loop {
        let n = space_at(b, start);
        if n == 0 {
            break;
        }
        start += n;
    }
    let mut end = b.len();
    while end > start {
        let n = space_before(b, end);
        if n == 0 {
            break;
        }
        end -= n;
    }
    (start, end, b)
}

/// The UTF-8 encodings of the characters Go's `unicode.IsSpace` (and Rust's
/// `char::is_whitespace`) call white space, but the ASCII ones.
const WIDE_SPACES: &[&[u8]] = &[
    "\u{85}".as_bytes(),
    "\u{a0}".as_bytes(),
    "\u{1680}".as_bytes(),
    "\u{2000}".as_bytes(),
    "\u{2001}".as_bytes(),
    "\u{2002}".as_bytes(),
    "\u{2003}".as_bytes(),
    "\u{2004}".as_bytes(),
    "\u{2005}".as_bytes(),
    "\u{2006}".as_bytes(),
    "\u{2007}".as_bytes(),
    "\u{2008}".as_bytes(),
    "\u{2009}".as_bytes(),
    "\u{200a}".as_bytes(),
    "\u{2028}".as_bytes(),
    "\u{2029}".as_bytes(),
    "\u{202f}".as_bytes(),
    "\u{205f}".as_bytes(),
    "\u{3000}".as_bytes(),
];

/// The length of the white-space character starting at byte `i` of `b`, or 0.
const fn space_at(b: &[u8], i: usize) -> usize {
    if i >= b.len() {
        return 0;
    }
    if matches!(b[i], b' ' | b'\t' | b'\n' | b'\r' | 0x0b | 0x0c) {
        return 1;
    }
    let mut k = 0;
    while k < WIDE_SPACES.len() {
        let w = WIDE_SPACES[k];
        if i + w.len() <= b.len() && bytes_at(b, i, w) {
            return w.len();
        }
        k += 1;
    }
    0
}

/// The length of the white-space character ending before byte `end` of `b`, or 0.
const fn space_before(b: &[u8], end: usize) -> usize {
    let mut len = 1;
    while len <= 3 && len <= end {
        if space_at(b, end - len) == len {
            return len;
        }
        len += 1;
    }
    0
}

/// Whether `b` holds `w` at byte `i`.
const fn bytes_at(b: &[u8], i: usize, w: &[u8]) -> bool {
    let mut j = 0;
    while j < w.len() {
        if i + j >= b.len() || b[i + j] != w[j] {
            return false;
        }
        j += 1;
    }
    true
}

const fn has_line_break((start, end, b): (usize, usize, &[u8])) -> bool {
    let mut i = start;
    while i < end {
        if b[i] == b'\n' || b[i] == b'\r' {
            return true;
        }
        i += 1;
    }
    false
}

const fn contains((start, end, h): (usize, usize, &[u8]), needle: &[u8]) -> bool {
    let mut i = start;
    while i + needle.len() <= end {
        if bytes_at(h, i, needle) {
            return true;
        }
        i += 1;
    }
    false
}

/// A [`Rule`](crate::crd::Rule) checked at compile time, for
/// `#[schemars(transform = rule!(...))]` on a struct, an enum or a field.
///
/// The CEL expression first, then any of `message = "..."`, `message_expression = "..."`,
/// `reason = FieldValueForbidden` (or `FieldValueInvalid`, `FieldValueRequired`,
/// `FieldValueDuplicate`), `field_path = ".x"`, `optional_old_self = true`. An empty rule, an
/// empty or multi-line message, a multi-line rule without a message (judged, as the API
/// server does, with the white space around them trimmed), a `field_path` starting with
/// neither a dot nor a bracket, `optional_old_self` (`true` or `false`) on a rule without
/// `oldSelf`, an unknown reason or key: each is a compile error. Whether the CEL compiles only the API server knows (it
/// refuses the CustomResourceDefinition with the rule and the compiler's message).
///
/// ```
/// use kctrl_client::rule;
/// use kctrl_client::crd::{Reason, Rule};
///
/// const RANGE: Rule = rule!("self.min <= self.max", message = "min must not exceed max",
///                           reason = FieldValueForbidden, field_path = ".min");
/// assert_eq!(RANGE, Rule::new("self.min <= self.max").message("min must not exceed max")
///     .reason(Reason::FieldValueForbidden).field_path(".min"));
/// ```
///
/// ```compile_fail
/// // error: a CEL validation rule must not be empty
/// const EMPTY: kctrl_client::crd::Rule = kctrl_client::rule!("  ");
/// ```
///
/// ```compile_fail
/// // error[E0425]: cannot find value `FieldValueWrong` in this scope
/// const WRONG: kctrl_client::crd::Rule = kctrl_client::rule!("self > 0", reason = FieldValueWrong);
/// ```
///
/// ```compile_fail
/// // error: optionalOldSelf is only for transition rules: the rule must use oldSelf
/// const OLD: kctrl_client::crd::Rule = kctrl_client::rule!("self > 0", optional_old_self = true);
/// ```
///
/// ```compile_fail
/// // error: optionalOldSelf is only for transition rules: the rule must use oldSelf
/// const OLD: kctrl_client::crd::Rule = kctrl_client::rule!("self > 0", optional_old_self = false);
/// ```
///
/// ```
/// // Line breaks around the text are trimmed, as the API server does; a leading bracket is a
/// // field path too.
/// const TRIMMED: kctrl_client::crd::Rule = kctrl_client::rule!("\n  self.a > 0\n",
///     message = "a must be positive\n", field_path = "['a']");
/// ```
#[macro_export]
macro_rules! rule {
    ($rule:expr $(, $key:ident = $value:expr)* $(,)?) => {
        const {
            let rule = $crate::crd::Rule::new($rule);
            $( let rule = $crate::__rule_key!(rule, $key, $value); )*
            rule.checked()
        }
    };
}

/// One `key = value` of [`rule!`]; not public API.
#[doc(hidden)]
#[macro_export]
macro_rules! __rule_key {
    ($rule:ident, message, $v:expr) => {
        $rule.message($v)
    };
    ($rule:ident, message_expression, $v:expr) => {
        $rule.message_expression($v)
    };
    ($rule:ident, reason, $v:expr) => {
        $rule.reason({
            #[allow(unused_imports)]
            use $crate::crd::Reason::*;
            $v
        })
    };
    ($rule:ident, field_path, $v:expr) => {
        $rule.field_path($v)
    };
    ($rule:ident, optional_old_self, $v:expr) => {
        $rule.optional_old_self($v)
    };
    ($rule:ident, $other:ident, $v:expr) => {
        ::core::compile_error!(::core::concat!(
            "unknown key `",
            ::core::stringify!($other),
            "` in rule!: expected message, message_expression, reason, field_path or optional_old_self"
        ))
    };
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_rule_is_written_with_the_keys_the_api_server_reads() {
        const R: Rule = crate::rule!(
            "self.x == oldSelf.x",
            message = "x is immutable",
            message_expression = "'x was ' + string(oldSelf.x)",
            reason = FieldValueForbidden,
            field_path = ".x",
            optional_old_self = true,
        );
        assert_eq!(
            R.to_value(),
            json!({
                "rule": "self.x == oldSelf.x", "message": "x is immutable",
                "messageExpression": "'x was ' + string(oldSelf.x)",
                "reason": "FieldValueForbidden", "fieldPath": ".x", "optionalOldSelf": true,
            })
        );
        let typed = serde_json::to_value(R.to_validation_rule()).unwrap();
        assert_eq!(typed, R.to_value());
    }

    /// The keys a transform wrote on `schema`, in order, with their entries.
    fn rule_keys(schema: &schemars::Schema) -> Vec<(String, Value)> {
        schema
            .as_object()
            .unwrap()
            .iter()
            .filter(|(k, _)| k.starts_with(RULE_KEY_PREFIX))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    }

    #[test]
    fn rule_keys_are_a_fixed_function_of_position_and_text() {
        // FNV-1a 64 of `"a"` (the JSON text, quotes included); of `a` alone it is
        // af63dc4c8601ec8c, the function's published test vector.
        assert_eq!(
            rule_key(7, &json!("a")),
            "x-kctrl-rule-000007-d4272417d7c77eea"
        );
        // Position first: the thousandth rule still sorts after the ninth.
        assert!(rule_key(9, &json!("z")) < rule_key(1000, &json!("a")));
    }

    #[test]
    fn the_transform_writes_each_rule_under_a_key_of_its_own() {
        let mut schema = schemars::json_schema!({
            "type": "object",
            "required": ["a"],
            "x-kubernetes-validations": [{"rule": "size(self) > 0"}],
        });
        let mut r = Rule::new("self.a <= self.b");
        let mut s = Rule::new("self.a > 0");
        schemars::transform::Transform::transform(&mut r, &mut schema);
        schemars::transform::Transform::transform(&mut s, &mut schema);
        // What was written by hand stays as it is.
        assert_eq!(
            schema.get(VALIDATIONS),
            Some(&json!([{"rule": "size(self) > 0"}]))
        );
        let keys = rule_keys(&schema);
        assert_eq!(keys.len(), 2, "{keys:?}");
        // In the order they were written, each with the node's required fields.
        assert!(keys[0].0.starts_with("x-kctrl-rule-000000-"), "{keys:?}");
        assert!(keys[1].0.starts_with("x-kctrl-rule-000001-"), "{keys:?}");
        assert_eq!(
            keys[0].1,
            json!({"rule": {"rule": "self.a <= self.b"}, "required": ["a"]})
        );
        assert_eq!(
            keys[1].1,
            json!({"rule": {"rule": "self.a > 0"}, "required": ["a"]})
        );
        // The same rule on another node gets another key than a different rule would: two
        // flattened structs' rules do not collide.
        let mut other = schemars::json_schema!({"type": "object"});
        schemars::transform::Transform::transform(&mut s, &mut other);
        assert_ne!(rule_keys(&other)[0].0, keys[0].0);
        // A boolean schema (anything) becomes an object carrying the rule.
        let mut any = schemars::Schema::from(true);
        schemars::transform::Transform::transform(&mut r, &mut any);
        assert_eq!(
            rule_keys(&any)[0].1,
            json!({"rule": {"rule": "self.a <= self.b"}, "required": []})
        );
    }

    #[test]
    fn problems_are_named() {
        let cases = [
            (Rule::new(" \t"), Some("must not be empty")),
            (
                Rule::new("self > 0").message(""),
                Some("message must not be empty"),
            ),
            (
                Rule::new("self > 0").message("a\nb"),
                Some("must be one line"),
            ),
            (Rule::new("self > 0 &&\n self < 9"), Some("needs a message")),
            (
                Rule::new("self > 0 &&\n self < 9").message("0 < x < 9"),
                None,
            ),
            (
                Rule::new("self > 0").message_expression(" "),
                Some("messageExpression"),
            ),
            (
                Rule::new("self.a > 0").field_path("a"),
                Some("starts with a dot or a bracket"),
            ),
            // Array notation first, as the API server takes it.
            (Rule::new("self.a > 0").field_path("['a.b']"), None),
            (
                Rule::new("self.a > 0").field_path(".a\n"),
                Some("fieldPath must be one line"),
            ),
            (
                Rule::new("self > 0").optional_old_self(true),
                Some("must use oldSelf"),
            ),
            (Rule::new("self == oldSelf").optional_old_self(true), None),
            // false too: the API server refuses optionalOldSelf set at all without oldSelf.
            (
                Rule::new("self > 0").optional_old_self(false),
                Some("must use oldSelf"),
            ),
            (Rule::new("self == oldSelf").optional_old_self(false), None),
            // Line breaks only around the text are trimmed, as the API server does.
            (Rule::new("self > 0\n"), None),
            (Rule::new("\r\n  self > 0 \n"), None),
            (Rule::new("self > 0").message("positive\n"), None),
            (
                Rule::new("self > 0").message("\u{a0}\u{2028}positive\u{3000}\n"),
                None,
            ),
            // Unicode white space alone is blank.
            (
                Rule::new("self > 0").message("\u{a0}"),
                Some("message must not be empty"),
            ),
            (Rule::new("\u{2003}\u{85}"), Some("rule must not be empty")),
            (
                Rule::new("self > 0").message_expression("\u{3000}"),
                Some("messageExpression"),
            ),
            // A line break inside still counts.
            (
                Rule::new("self > 0").message("\na\nb\n"),
                Some("must be one line"),
            ),
            (
                Rule::new("\nself > 0 &&\n self < 9\n"),
                Some("needs a message"),
            ),
        ];
        for (rule, want) in cases {
            let got = rule.problem();
            match want {
                Some(w) => assert!(got.is_some_and(|g| g.contains(w)), "{rule:?}: {got:?}"),
                None => assert_eq!(got, None, "{rule:?}"),
            }
            // A rule written by hand (extend) is judged the same.
            let by_hand = entry_problem(&rule.to_value());
            assert_eq!(by_hand.is_some(), got.is_some(), "{rule:?}: {by_hand:?}");
        }
    }

    #[test]
    fn hand_written_entries_are_checked_for_keys_types_and_reasons() {
        let bad = [
            (json!("self > 0"), "must be an object"),
            (json!({"message": "m"}), "needs a `rule`"),
            (
                json!({"rule": "self > 0", "reason": "Nope"}),
                "unknown reason `Nope`",
            ),
            (
                json!({"rule": "self > 0", "messsage": "m"}),
                "no key `messsage`",
            ),
            (
                json!({"rule": "self > 0", "optionalOldSelf": "yes"}),
                "wrong type",
            ),
        ];
        for (v, want) in bad {
            let got = entry_problem(&v).unwrap_or_default();
            assert!(got.contains(want), "{v}: {got}");
        }
        assert_eq!(
            entry_problem(&json!({"rule": "self > 0", "reason": "FieldValueRequired"})),
            None
        );
    }

    #[test]
    fn reasons_round_trip() {
        for r in [
            Reason::FieldValueInvalid,
            Reason::FieldValueForbidden,
            Reason::FieldValueRequired,
            Reason::FieldValueDuplicate,
        ] {
            assert_eq!(Reason::parse(r.as_str()), Some(r));
        }
        assert_eq!(Reason::parse("Invalid"), None);
    }
}

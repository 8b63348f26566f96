//! Status conditions: set, find and remove entries of a `conditions` list of
//! [`Condition`]s, as apimachinery's `meta` package does for Go controllers.
//!
//! The rule that matters is the transition time: [`set_status_condition`] writes
//! `lastTransitionTime` only when the condition is new or its `status` changes, so a
//! reconcile that sets the same condition on every pass does not move it (and does not make
//! a status update that changes nothing). `reason`, `message` and `observedGeneration` are
//! always brought up to date.
//!
//! | apimachinery (`k8s.io/apimachinery/pkg/api/meta`) | here |
//! |---|---|
//! | `SetStatusCondition(&conds, c)` | [`set_status_condition`]`(&mut conds, c)` |
//! | `FindStatusCondition(conds, t)` | [`find_status_condition`] |
//! | `RemoveStatusCondition(&conds, t)` | [`remove_status_condition`] |
//! | `IsStatusConditionTrue` / `IsStatusConditionFalse` | [`is_status_condition_true`] / [`is_status_condition_false`] |
//! | `IsStatusConditionPresentAndEqual(conds, t, s)` | [`is_status_condition_present_and_equal`] |
//!
//! The conditions of any status type work, whatever holds them: a `Vec<Condition>`, or an
//! `Option<Vec<Condition>>` through `get_or_insert_with(Vec::new)`.
//!
//! ```
//! use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
//! use k8s_openapi::jiff::Timestamp;
//! use kctrl_runtime::conditions::{self, ConditionStatus};
//!
//! let mut status_conditions: Option<Vec<Condition>> = None;
//! let list = status_conditions.get_or_insert_with(Vec::new);
//! let now = Timestamp::from_second(1_700_000_000).unwrap();
//! let ready = conditions::condition("Ready", ConditionStatus::False, "Creating", "creating the job", Some(3), now);
//! assert!(conditions::set_status_condition(list, ready));
//!
//! // The same condition later: nothing changes, not even the time.
//! let later = Timestamp::from_second(1_700_000_060).unwrap();
//! let again = conditions::condition("Ready", ConditionStatus::False, "Creating", "creating the job", Some(3), later);
//! assert!(!conditions::set_status_condition(list, again));
//! assert_eq!(list[0].last_transition_time, Time(now));
//!
//! // A transition: the status and the time change.
//! let done = conditions::condition("Ready", ConditionStatus::True, "Created", "", Some(3), later);
//! assert!(conditions::set_status_condition(list, done));
//! assert!(conditions::is_status_condition_true(list, "Ready"));
//! assert_eq!(list[0].last_transition_time, Time(later));
//! ```

use std::fmt;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::jiff::Timestamp;

/// The three values of a condition's `status`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ConditionStatus {
    /// `True`.
    True,
    /// `False`.
    False,
    /// `Unknown`: the controller cannot tell.
    Unknown,
}

impl ConditionStatus {
    /// The value as the API writes it: `True`, `False` or `Unknown`.
    pub fn as_str(self) -> &'static str {
        match self {
            ConditionStatus::True => "True",
            ConditionStatus::False => "False",
            ConditionStatus::Unknown => "Unknown",
        }
    }
}

impl fmt::Display for ConditionStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl From<bool> for ConditionStatus {
    fn from(value: bool) -> Self {
        if value {
            ConditionStatus::True
        } else {
            ConditionStatus::False
        }
    }
}

/// A [`Condition`] whose `lastTransitionTime` is `now`: what [`set_status_condition`] records
/// if it is new or a transition (and ignores otherwise).
pub fn condition(
    type_: impl Into<String>,
    status: ConditionStatus,
    reason: impl Into<String>,
    message: impl Into<String>,
    observed_generation: Option<i64>,
    now: Timestamp,
) -> Condition {
    Condition {
        type_: type_.into(),
        status: status.as_str().to_owned(),
        reason: reason.into(),
        message: message.into(),
        observed_generation,
        last_transition_time: Time(now),
    }
}

/// Sets `new` in `conditions` (apimachinery's `SetStatusCondition`) and returns whether
/// anything changed.
///
/// A condition of a type not yet in the list is appended as it is. Otherwise the entry of
/// that type is updated in place: on a change of `status`, the status and
/// `lastTransitionTime` (taken from `new`); and whenever they differ, `reason`, `message` and
/// `observedGeneration`. The transition time of an entry whose status stays is kept, whatever
/// `new` says.
pub fn set_status_condition(conditions: &mut Vec<Condition>, new: Condition) -> bool {
    let Some(existing) = conditions.iter_mut().find(|c| c.type_ == new.type_) else {
        conditions.push(new);
        return true;
    };
    let mut changed = false;
    if existing.status != new.status {
        existing.status = new.status;
        existing.last_transition_time = new.last_transition_time;
        changed = true;
    }
    if existing.reason != new.reason {
        existing.reason = new.reason;
        changed = true;
    }
    if existing.message != new.message {
        existing.message = new.message;
        changed = true;
    }
    // Go's int64 with omitempty: 0 and absent are one value.
    if existing.observed_generation.unwrap_or(0) != new.observed_generation.unwrap_or(0) {
        existing.observed_generation = new.observed_generation;
        changed = true;
    }
    changed
}

/// Removes the condition of `type_`; returns whether there was one.
pub fn remove_status_condition(conditions: &mut Vec<Condition>, type_: &str) -> bool {
    let before = conditions.len();
    conditions.retain(|c| c.type_ != type_);
    conditions.len() != before
}

/// The condition of `type_`, if the list has one.
pub fn find_status_condition<'a>(
    conditions: &'a [Condition],
    type_: &str,
) -> Option<&'a Condition> {
    conditions.iter().find(|c| c.type_ == type_)
}

/// Whether the condition of `type_` is present with status `True`.
pub fn is_status_condition_true(conditions: &[Condition], type_: &str) -> bool {
    is_status_condition_present_and_equal(conditions, type_, ConditionStatus::True)
}

/// Whether the condition of `type_` is present with status `False`.
pub fn is_status_condition_false(conditions: &[Condition], type_: &str) -> bool {
    is_status_condition_present_and_equal(conditions, type_, ConditionStatus::False)
}

/// Whether the condition of `type_` is present with `status`.
pub fn is_status_condition_present_and_equal(
    conditions: &[Condition],
    type_: &str,
    status: ConditionStatus,
) -> bool {
    find_status_condition(conditions, type_).is_some_and(|c| c.status == status.as_str())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(second: i64) -> Timestamp {
        Timestamp::from_second(second).expect("a valid second")
    }

    fn c(
        type_: &str,
        status: ConditionStatus,
        reason: &str,
        message: &str,
        generation: Option<i64>,
        t: i64,
    ) -> Condition {
        condition(type_, status, reason, message, generation, at(t))
    }

    /// apimachinery's TestSetStatusCondition cases, with the transition times as seconds.
    #[test]
    fn set_status_condition_moves_the_time_only_on_a_status_change() {
        use ConditionStatus::{False, True};
        struct Case {
            name: &'static str,
            conditions: Vec<Condition>,
            to_add: Condition,
            expected: Vec<Condition>,
            changed: bool,
        }
        let cases = [
            Case {
                name: "should-add",
                conditions: vec![
                    c("first", True, "", "", None, 0),
                    c("third", True, "", "", None, 0),
                ],
                to_add: c("second", True, "reason", "message", Some(3), 1),
                expected: vec![
                    c("first", True, "", "", None, 0),
                    c("third", True, "", "", None, 0),
                    c("second", True, "reason", "message", Some(3), 1),
                ],
                changed: true,
            },
            Case {
                name: "use-supplied-time",
                conditions: vec![
                    c("first", True, "", "", None, 0),
                    c("second", False, "", "", None, 0),
                    c("third", True, "", "", None, 0),
                ],
                to_add: c("second", True, "reason", "message", Some(3), 1),
                expected: vec![
                    c("first", True, "", "", None, 0),
                    c("second", True, "reason", "message", Some(3), 1),
                    c("third", True, "", "", None, 0),
                ],
                changed: true,
            },
            Case {
                name: "update-fields",
                conditions: vec![
                    c("first", True, "", "", None, 0),
                    c("second", True, "", "", Some(3), 0),
                    c("third", True, "", "", None, 0),
                ],
                to_add: c("second", True, "reason", "message", Some(3), 2),
                expected: vec![
                    c("first", True, "", "", None, 0),
                    c("second", True, "reason", "message", Some(3), 0),
                    c("third", True, "", "", None, 0),
                ],
                changed: true,
            },
            Case {
                name: "nothing changes",
                conditions: vec![c("first", True, "r", "m", Some(3), 0)],
                to_add: c("first", True, "r", "m", Some(3), 5),
                expected: vec![c("first", True, "r", "m", Some(3), 0)],
                changed: false,
            },
            Case {
                name: "an observed generation of 0 is none",
                conditions: vec![c("first", True, "r", "m", None, 0)],
                to_add: c("first", True, "r", "m", Some(0), 5),
                expected: vec![c("first", True, "r", "m", None, 0)],
                changed: false,
            },
            Case {
                name: "only the observed generation",
                conditions: vec![c("first", True, "r", "m", Some(3), 0)],
                to_add: c("first", True, "r", "m", Some(4), 5),
                expected: vec![c("first", True, "r", "m", Some(4), 0)],
                changed: true,
            },
        ];
        for case in cases {
            let mut conditions = case.conditions;
            let changed = set_status_condition(&mut conditions, case.to_add);
            assert_eq!(conditions, case.expected, "{}", case.name);
            assert_eq!(changed, case.changed, "{}", case.name);
        }
    }

    /// apimachinery's TestRemoveStatusCondition cases.
    #[test]
    fn remove_status_condition_removes_only_that_type() {
        use ConditionStatus::True;
        let three = || {
            vec![
                c("first", True, "", "", None, 0),
                c("second", True, "", "", None, 0),
                c("third", True, "", "", None, 0),
            ]
        };
        let mut present = three();
        assert!(remove_status_condition(&mut present, "second"));
        assert_eq!(
            present,
            vec![
                c("first", True, "", "", None, 0),
                c("third", True, "", "", None, 0)
            ]
        );
        let mut absent = three();
        assert!(!remove_status_condition(&mut absent, "fourth"));
        assert_eq!(absent, three());
        let mut empty = Vec::new();
        assert!(!remove_status_condition(&mut empty, "Foo"));
    }

    /// apimachinery's TestFindStatusCondition and IsStatusCondition* cases.
    #[test]
    fn find_and_test_conditions() {
        use ConditionStatus::{False, True, Unknown};
        let list = vec![
            c("Ready", True, "", "", None, 0),
            c("Degraded", False, "", "", None, 0),
        ];
        assert_eq!(
            find_status_condition(&list, "Ready").map(|c| c.status.as_str()),
            Some("True")
        );
        assert!(find_status_condition(&list, "Missing").is_none());
        assert!(is_status_condition_true(&list, "Ready"));
        assert!(!is_status_condition_false(&list, "Ready"));
        assert!(is_status_condition_false(&list, "Degraded"));
        assert!(!is_status_condition_true(&list, "Missing"));
        assert!(!is_status_condition_false(&list, "Missing"));
        assert!(is_status_condition_present_and_equal(
            &list, "Degraded", False
        ));
        assert!(!is_status_condition_present_and_equal(
            &list, "Degraded", Unknown
        ));
        assert_eq!(ConditionStatus::from(true).to_string(), "True");
    }
}

//! Reading the JUnit XML report Ginkgo writes (`--ginkgo.junit-report`).
//!
//! Only what the summary needs: every `<testcase>` with its `name`, `status` and `time`
//! attributes and the `message` of its `<failure>`, `<error>` or `<skipped>` child. Ginkgo's
//! report (Go's `encoding/xml`) escapes all character data and never uses CDATA, so a `<` in the
//! text is always markup; a small scanner is enough and no XML dependency is needed.

use anyhow::{Context, Result, bail};

/// One `<testcase>` of the report.
#[derive(Clone, Debug, PartialEq)]
pub struct TestCase {
    /// `name`: the node type in brackets, the spec's full text, then its labels, e.g.
    /// `[It] [sig-apps] Deployment deployment should support rollover [Conformance] [sig-apps, Conformance]`.
    pub name: String,
    /// Ginkgo's spec state: `passed`, `failed`, `skipped`, `pending`, `timedout`,
    /// `interrupted`, `aborted` or `panicked`.
    pub status: String,
    /// Run time in seconds.
    pub time: f64,
    /// `message` of the `<failure>` / `<error>` / `<skipped>` child, if any. Ginkgo writes
    /// `skipped` for specs left out by the focus/skip filters and `skipped - <reason>` for specs
    /// that skipped themselves at run time.
    pub message: Option<String>,
}

/// What became of a spec.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Ran and passed.
    Passed,
    /// Ran and did not pass (failed, timed out, interrupted, aborted, panicked).
    Failed,
    /// Did not run (filtered out, skipped itself, pending).
    Skipped,
}

impl TestCase {
    /// The outcome according to `status`.
    pub fn outcome(&self) -> Outcome {
        match self.status.as_str() {
            "passed" => Outcome::Passed,
            "skipped" | "pending" => Outcome::Skipped,
            _ => Outcome::Failed,
        }
    }

    /// Whether Ginkgo's filters left it out (as opposed to a spec that skipped itself).
    pub fn filtered_out(&self) -> bool {
        self.status == "skipped" && self.message.as_deref().is_none_or(|m| m == "skipped")
    }

    /// The Ginkgo node type: `It`, `SynchronizedBeforeSuite`, `ReportAfterSuite`, ….
    pub fn node_type(&self) -> &str {
        self.name
            .strip_prefix('[')
            .and_then(|rest| rest.split_once(']'))
            .map_or("", |(node, _)| node)
    }

    /// The spec text without the node type and without the trailing label list Ginkgo appends
    /// (`[label, label]`, recognisable by its `, ` separators or by repeating a bracketed tag of
    /// the text, e.g. `… [Conformance] [sig-apps, Conformance]`).
    pub fn text(&self) -> &str {
        let rest = match self.name.split_once("] ") {
            Some((node, rest)) if node.starts_with('[') && !node.contains(' ') => rest,
            _ => self.name.as_str(),
        };
        if let Some(at) = rest.rfind(" [")
            && rest.ends_with(']')
        {
            let labels = &rest[at + 2..rest.len() - 1];
            let is_label_list = labels.split(", ").all(|l| {
                !l.is_empty() && !l.contains(' ') && rest[..at].contains(&format!("[{l}]"))
            });
            if is_label_list {
                return &rest[..at];
            }
        }
        rest
    }
}

/// Parses every `<testcase>` of a JUnit XML document.
pub fn parse(xml: &str) -> Result<Vec<TestCase>> {
    if !xml.contains("<testsuite") {
        bail!("not a JUnit report: no <testsuite> element");
    }
    let mut cases = Vec::new();
    let mut rest = xml;
    while let Some(start) = find_element(rest, "testcase") {
        rest = &rest[start..];
        let (attrs, self_closing, after) = open_tag(rest).context("unterminated <testcase> tag")?;
        let body = if self_closing {
            ""
        } else {
            let end = after
                .find("</testcase>")
                .context("<testcase> without </testcase>")?;
            &after[..end]
        };
        let name = attr(attrs, "name").context("<testcase> without a name")?;
        let status = attr(attrs, "status").unwrap_or_default();
        let time = attr(attrs, "time")
            .and_then(|t| t.parse().ok())
            .unwrap_or(0.0);
        let message = ["failure", "error", "skipped"].iter().find_map(|child| {
            let at = find_element(body, child)?;
            let (attrs, _, _) = open_tag(&body[at..])?;
            Some(attr(attrs, "message").unwrap_or_default())
        });
        // Without a status attribute (other JUnit writers), infer it from the child.
        let status = if status.is_empty() {
            match ["failure", "error", "skipped"]
                .iter()
                .find(|c| find_element(body, c).is_some())
            {
                Some(&"skipped") => "skipped".to_owned(),
                Some(_) => "failed".to_owned(),
                None => "passed".to_owned(),
            }
        } else {
            status
        };
        cases.push(TestCase {
            name,
            status,
            time,
            message,
        });
        rest = &after[body.len()..];
    }
    Ok(cases)
}

/// Byte offset of the next `<name` start tag (not a longer name such as `<testcases`).
fn find_element(text: &str, name: &str) -> Option<usize> {
    let open = format!("<{name}");
    let mut from = 0;
    while let Some(at) = text[from..].find(&open) {
        let at = from + at;
        let next = text[at + open.len()..].chars().next();
        if matches!(next, Some(c) if c.is_whitespace() || c == '>' || c == '/') {
            return Some(at);
        }
        from = at + open.len();
    }
    None
}

/// Splits `<name attrs…>` or `<name attrs…/>` at the start of `text` into (attribute text,
/// self-closing, the text after the tag). Quoted `>` inside attributes are skipped.
fn open_tag(text: &str) -> Option<(&str, bool, &str)> {
    let mut quote = None;
    for (i, c) in text.char_indices() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some(_), _) => {}
            (None, '"' | '\'') => quote = Some(c),
            (None, '>') => {
                let inner = &text[..i];
                let self_closing = inner.ends_with('/');
                let inner = inner.trim_end_matches('/');
                let attrs = inner.find(char::is_whitespace).map_or("", |s| &inner[s..]);
                return Some((attrs, self_closing, &text[i + 1..]));
            }
            _ => {}
        }
    }
    None
}

/// The unescaped value of attribute `key` in an attribute list.
fn attr(attrs: &str, key: &str) -> Option<String> {
    let mut rest = attrs;
    loop {
        rest = rest.trim_start();
        let eq = rest.find('=')?;
        let name = rest[..eq].trim();
        let after = rest[eq + 1..].trim_start();
        let quote = after.chars().next()?;
        if quote != '"' && quote != '\'' {
            return None;
        }
        let end = after[1..].find(quote)? + 1;
        if name == key {
            return Some(unescape(&after[1..end]));
        }
        rest = &after[end + 1..];
    }
}

/// Replaces XML's predefined entities and character references.
fn unescape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(at) = rest.find('&') {
        out.push_str(&rest[..at]);
        rest = &rest[at..];
        let Some(end) = rest.find(';') else { break };
        let entity = &rest[1..end];
        let decoded = match entity {
            "lt" => Some('<'),
            "gt" => Some('>'),
            "amp" => Some('&'),
            "quot" => Some('"'),
            "apos" => Some('\''),
            _ => entity
                .strip_prefix("#x")
                .map(|h| u32::from_str_radix(h, 16))
                .or_else(|| entity.strip_prefix('#').map(str::parse))
                .and_then(Result::ok)
                .and_then(char::from_u32),
        };
        match decoded {
            Some(c) => {
                out.push(c);
                rest = &rest[end + 1..];
            }
            None => {
                out.push('&');
                rest = &rest[1..];
            }
        }
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The shape Ginkgo v2 writes: suite properties, suite nodes, filtered specs, a spec that
    /// passed, one that failed, one that skipped itself; entities as Go's encoding/xml escapes.
    const REPORT: &str = r#"<?xml version="1.0" encoding="UTF-8"?>
  <testsuites tests="6" disabled="0" errors="0" failures="1" time="97.5">
      <testsuite name="Kubernetes e2e suite" package="/x" tests="6" disabled="0" skipped="3" errors="0" failures="1" time="97.5" timestamp="2026-11-24T10:00:00">
          <properties>
              <property name="SuiteSucceeded" value="false"></property>
              <property name="SkipStrings" value="load-balancer&#39;s"></property>
          </properties>
          <testcase name="[SynchronizedBeforeSuite]" classname="Kubernetes e2e suite" status="passed" time="0.2">
              <system-err>&gt; Enter [SynchronizedBeforeSuite] TOP-LEVEL</system-err>
          </testcase>
          <testcase name="[It] [sig-apps] Deployment deployment should support rollover [Conformance] [sig-apps, Conformance]" classname="Kubernetes e2e suite" status="passed" time="21.5"></testcase>
          <testcase name="[It] [sig-apps] Deployment iterative rollouts should eventually progress [sig-apps]" classname="Kubernetes e2e suite" status="failed" time="300.1">
              <failure message="timed out waiting for the condition&#xA;deployment &#34;webserver&#34; never completed" type="failed">[FAILED] timed out&#xA;In [It] at: deployment.go:1 &lt;here&gt;</failure>
              <system-out>a &lt;failure message=&#34;not this one&#34;&gt;</system-out>
          </testcase>
          <testcase name="[It] [sig-apps] Deployment should not disrupt a cloud load-balancer&#39;s connectivity during rollout [sig-apps]" classname="Kubernetes e2e suite" status="skipped" time="0">
              <skipped message="skipped"></skipped>
          </testcase>
          <testcase name="[It] [sig-apps] ReplicaSet should serve a basic image on each replica [Conformance] [sig-apps, Conformance]" classname="Kubernetes e2e suite" status="skipped" time="0">
              <skipped message="skipped"></skipped>
          </testcase>
          <testcase name="[It] [sig-apps] Deployment needs a provider [sig-apps]" classname="Kubernetes e2e suite" status="skipped" time="0.01">
              <skipped message="skipped - Only supported for providers [aws] (not skeleton)"></skipped>
          </testcase>
          <testcase name="[ReportAfterSuite] Kubernetes e2e suite report" classname="Kubernetes e2e suite" status="passed" time="0"/>
      </testsuite>
  </testsuites>"#;

    #[test]
    fn parses_every_testcase_with_status_time_and_message() {
        let cases = parse(REPORT).unwrap();
        assert_eq!(cases.len(), 7);
        assert_eq!(cases[0].node_type(), "SynchronizedBeforeSuite");
        assert_eq!(cases[0].outcome(), Outcome::Passed);
        assert_eq!(cases[0].message, None);

        let rollover = &cases[1];
        assert_eq!(rollover.node_type(), "It");
        assert_eq!(rollover.time, 21.5);
        assert_eq!(
            rollover.text(),
            "[sig-apps] Deployment deployment should support rollover [Conformance]"
        );

        let failed = &cases[2];
        assert_eq!(failed.outcome(), Outcome::Failed);
        assert_eq!(
            failed.message.as_deref(),
            Some("timed out waiting for the condition\ndeployment \"webserver\" never completed")
        );
        assert_eq!(
            failed.text(),
            "[sig-apps] Deployment iterative rollouts should eventually progress"
        );

        let filtered = &cases[3];
        assert_eq!(filtered.outcome(), Outcome::Skipped);
        assert!(filtered.filtered_out());
        assert_eq!(
            filtered.text(),
            "[sig-apps] Deployment should not disrupt a cloud load-balancer's connectivity during rollout"
        );

        let self_skipped = &cases[5];
        assert_eq!(self_skipped.outcome(), Outcome::Skipped);
        assert!(!self_skipped.filtered_out());
        assert_eq!(
            self_skipped.message.as_deref(),
            Some("skipped - Only supported for providers [aws] (not skeleton)")
        );

        assert_eq!(cases[6].node_type(), "ReportAfterSuite");
        assert_eq!(cases[6].text(), "Kubernetes e2e suite report");
    }

    #[test]
    fn every_non_passing_state_counts_as_failed() {
        for status in ["failed", "timedout", "interrupted", "aborted", "panicked"] {
            let xml = format!(
                r#"<testsuite><testcase name="[It] x" status="{status}" time="1"><error message="m" type="{status}">d</error></testcase></testsuite>"#
            );
            let cases = parse(&xml).unwrap();
            assert_eq!(cases[0].outcome(), Outcome::Failed, "{status}");
            assert_eq!(cases[0].message.as_deref(), Some("m"));
        }
        let pending = parse(r#"<testsuite><testcase name="[It] p" status="pending"><skipped message="pending"/></testcase></testsuite>"#).unwrap();
        assert_eq!(pending[0].outcome(), Outcome::Skipped);
        assert!(!pending[0].filtered_out());
    }

    #[test]
    fn status_is_inferred_without_the_attribute() {
        let xml = r#"<testsuites><testsuite name="s">
            <testcase name="a" time="1"></testcase>
            <testcase name="b"><failure message="boom"/></testcase>
            <testcase name="c"><skipped/></testcase>
        </testsuite></testsuites>"#;
        let cases = parse(xml).unwrap();
        let statuses: Vec<&str> = cases.iter().map(|c| c.status.as_str()).collect();
        assert_eq!(statuses, ["passed", "failed", "skipped"]);
        assert_eq!(cases[1].message.as_deref(), Some("boom"));
        // A name without a node type is kept as it is.
        assert_eq!(cases[0].text(), "a");
    }

    #[test]
    fn rejects_what_is_not_a_report() {
        assert!(parse("").is_err());
        assert!(parse("<html><body>502</body></html>").is_err());
        assert!(parse(r#"<testsuite><testcase name="x" status="passed">"#).is_err());
        assert!(parse(r#"<testsuite><testcase status="passed"></testcase></testsuite>"#).is_err());
        assert_eq!(parse("<testsuite></testsuite>").unwrap(), Vec::new());
    }

    #[test]
    fn unescapes_entities_and_keeps_unknown_ones() {
        assert_eq!(
            unescape("a&lt;b&gt;&amp;&quot;&apos;&#39;&#x41;"),
            "a<b>&\"''A"
        );
        assert_eq!(unescape("AT&T &nbsp; &#xZZ;"), "AT&T &nbsp; &#xZZ;");
        assert_eq!(unescape("trailing &"), "trailing &");
    }

    #[test]
    fn labels_are_only_stripped_when_they_are_a_label_list() {
        let case = |name: &str| TestCase {
            name: name.to_owned(),
            status: "passed".to_owned(),
            time: 0.0,
            message: None,
        };
        // A bracketed word that is part of the text stays.
        assert_eq!(
            case("[It] [sig-apps] Deployment scales [Slow]").text(),
            "[sig-apps] Deployment scales [Slow]"
        );
        assert_eq!(
            case("[It] [sig-apps] Deployment x [Feature:Y] [sig-apps, Feature:Y]").text(),
            "[sig-apps] Deployment x [Feature:Y]"
        );
    }
}

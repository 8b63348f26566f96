//! Impersonation (`as`, `as-uid`, `as-groups`, `as-user-extra`): act as another user by sending
//! `Impersonate-*` headers, which the API server authorizes against the real identity.

use std::collections::BTreeMap;

use http::{HeaderMap, HeaderName, HeaderValue};

use crate::error::ConfigError;

/// The identity to impersonate.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Impersonation {
    /// `Impersonate-User` (`as`).
    pub user: String,
    /// `Impersonate-Uid` (`as-uid`).
    pub uid: Option<String>,
    /// One `Impersonate-Group` header per group (`as-groups`).
    pub groups: Vec<String>,
    /// One `Impersonate-Extra-<key>` header per value (`as-user-extra`); keys are
    /// percent-encoded where a header name cannot hold them.
    pub extra: BTreeMap<String, Vec<String>>,
}

impl Impersonation {
    /// The request headers that carry this impersonation.
    pub fn headers(&self) -> Result<HeaderMap, ConfigError> {
        let value = |v: &str, what: &str| {
            HeaderValue::from_str(v).map_err(|_| ConfigError::InvalidHeader {
                what: what.to_owned(),
            })
        };
        let mut headers = HeaderMap::new();
        headers.insert(
            HeaderName::from_static("impersonate-user"),
            value(&self.user, "impersonated user")?,
        );
        if let Some(uid) = self.uid.as_deref().filter(|u| !u.is_empty()) {
            headers.insert(
                HeaderName::from_static("impersonate-uid"),
                value(uid, "impersonated uid")?,
            );
        }
        for group in &self.groups {
            headers.append(
                HeaderName::from_static("impersonate-group"),
                value(group, "impersonated group")?,
            );
        }
        for (key, values) in &self.extra {
            let name = format!("impersonate-extra-{}", escape_header_key(key));
            let name = HeaderName::from_bytes(name.as_bytes()).map_err(|_| {
                ConfigError::InvalidHeader {
                    what: format!("impersonated extra key {key:?}"),
                }
            })?;
            for v in values {
                headers.append(name.clone(), value(v, "impersonated extra value")?);
            }
        }
        Ok(headers)
    }
}

/// Percent-encodes every byte that is not an HTTP token character, and `%` itself, so the
/// server can decode the key unambiguously.
fn escape_header_key(key: &str) -> String {
    let mut out = String::with_capacity(key.len());
    for b in key.bytes() {
        let token_char = b.is_ascii_alphanumeric() || b"!#$&'*+-.^_`|~".contains(&b);
        if token_char {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_for_a_full_impersonation() {
        let imp = Impersonation {
            user: "alice".to_owned(),
            uid: Some("abc123".to_owned()),
            groups: vec!["group-1".to_owned(), "group-2".to_owned()],
            extra: BTreeMap::from([
                (
                    "some-key".to_owned(),
                    vec!["v1".to_owned(), "v2".to_owned()],
                ),
                ("example.com/scopes".to_owned(), vec!["view".to_owned()]),
            ]),
        };
        let h = imp.headers().unwrap();
        assert_eq!(h["impersonate-user"], "alice");
        assert_eq!(h["impersonate-uid"], "abc123");
        let groups: Vec<_> = h.get_all("impersonate-group").iter().collect();
        assert_eq!(groups, ["group-1", "group-2"]);
        let extra: Vec<_> = h.get_all("impersonate-extra-some-key").iter().collect();
        assert_eq!(extra, ["v1", "v2"]);
        assert_eq!(h["impersonate-extra-example.com%2Fscopes"], "view");
    }

    #[test]
    fn escapes_like_client_go() {
        assert_eq!(escape_header_key("a/b%c d"), "a%2Fb%25c%20d");
        assert_eq!(escape_header_key("plain-Key_1.x"), "plain-Key_1.x");
    }

    #[test]
    fn rejects_values_that_cannot_be_headers() {
        let imp = Impersonation {
            user: "bad\nuser".to_owned(),
            ..Impersonation::default()
        };
        assert!(matches!(
            imp.headers(),
            Err(ConfigError::InvalidHeader { .. })
        ));
    }
}

//! A wrapper for credential material (tokens, passwords, private keys, plugin environment
//! values) whose `Debug` and `Display` print `<redacted>`, so a configuration can be logged or
//! printed with `{:?}` without leaking what it protects.

use std::fmt;

/// A value that must not appear in logs or error messages.
///
/// `Debug` and `Display` print `<redacted>`; read the value with [`Secret::expose`].
///
/// ```
/// use kctrl_config::Secret;
///
/// let token = Secret::new("s3cr3t".to_owned());
/// assert_eq!(format!("{token:?} {token}"), "<redacted> <redacted>");
/// assert_eq!(token.expose(), "s3cr3t");
/// ```
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Secret<T>(T);

impl<T> Secret<T> {
    /// Wraps `value`.
    pub fn new(value: T) -> Self {
        Self(value)
    }

    /// The protected value. Keep it out of logs.
    pub fn expose(&self) -> &T {
        &self.0
    }

    /// Unwraps the protected value.
    pub fn into_inner(self) -> T {
        self.0
    }
}

impl<T> From<T> for Secret<T> {
    fn from(value: T) -> Self {
        Self(value)
    }
}

impl From<&str> for Secret<String> {
    fn from(value: &str) -> Self {
        Self(value.to_owned())
    }
}

impl<T> fmt::Debug for Secret<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<redacted>")
    }
}

impl<T> fmt::Display for Secret<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<redacted>")
    }
}

impl<'de, T: serde::Deserialize<'de>> serde::Deserialize<'de> for Secret<T> {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        T::deserialize(deserializer).map(Secret)
    }
}

impl Secret<String> {
    /// Whether the protected string is empty (an unset kubeconfig field).
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl Secret<Vec<u8>> {
    /// Whether the protected bytes are empty (an unset kubeconfig field).
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_and_display_are_redacted() {
        let s = Secret::new(b"key material".to_vec());
        assert_eq!(format!("{s:?}"), "<redacted>");
        assert_eq!(format!("{s:#?}"), "<redacted>");
        assert_eq!(s.to_string(), "<redacted>");
        assert_eq!(s.expose(), b"key material");
    }

    #[test]
    fn deserializes_transparently() {
        let s: Secret<String> = serde_json::from_str("\"tok\"").unwrap();
        assert_eq!(s.expose(), "tok");
    }
}

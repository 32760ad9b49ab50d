//! [`McpSecret`]: a secret value of an MCP server entry (a bearer token, an HTTP header
//! value). Kept in a [`SecretString`], so `Debug` and log lines never show it.
//!
//! It serializes to its value, because entries are stored as JSON (the session's
//! configuration, the tenant's registry); every answer of the API goes through the entry's
//! `redacted()` first, which replaces each secret by [`REDACTED`].

use secrecy::{ExposeSecret, SecretString};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// What the API shows in place of a secret that is set.
pub const REDACTED: &str = "<redacted>";

#[derive(Clone)]
pub struct McpSecret(SecretString);

impl McpSecret {
    pub fn new(value: impl Into<String>) -> Self {
        Self(SecretString::from(value.into()))
    }

    /// The value, for the request that needs it (never for a log line or an answer).
    pub fn expose(&self) -> &str {
        self.0.expose_secret()
    }

    /// The placeholder the API shows.
    pub fn redacted() -> Self {
        Self::new(REDACTED)
    }

    /// Whether this is the placeholder (a client sending back what it was shown).
    pub fn is_placeholder(&self) -> bool {
        self.expose() == REDACTED
    }
}

impl std::fmt::Debug for McpSecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(REDACTED)
    }
}

impl PartialEq for McpSecret {
    fn eq(&self, other: &Self) -> bool {
        self.expose() == other.expose()
    }
}

impl Serialize for McpSecret {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.expose())
    }
}

impl<'de> Deserialize<'de> for McpSecret {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        String::deserialize(deserializer).map(Self::new)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_hides_the_value_and_json_keeps_it_for_storage() {
        let secret = McpSecret::new("s3cret");
        assert_eq!(format!("{secret:?}"), REDACTED);
        assert_eq!(serde_json::to_string(&secret).unwrap(), "\"s3cret\"");
        let back: McpSecret = serde_json::from_str("\"s3cret\"").unwrap();
        assert_eq!(back, secret);
        assert!(McpSecret::redacted().is_placeholder());
    }
}

//! Identifier newtypes. Every id that names a stored object is issued by the server (D10):
//! random, unguessable, prefixed by kind, and never derived from client input.

use serde::{Deserialize, Serialize};
use std::fmt;

macro_rules! id_type {
    ($(#[$doc:meta])* $name:ident, $prefix:literal) => {
        $(#[$doc])*
        #[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
        #[serde(transparent)]
        pub struct $name(String);

        impl $name {
            /// The prefix every server-issued id of this kind starts with.
            pub const PREFIX: &'static str = $prefix;

            /// Issues a fresh random id (122 bits of randomness).
            pub fn generate() -> Self {
                Self(format!("{}{}", $prefix, uuid::Uuid::new_v4().simple()))
            }

            /// Wraps an id read back from the store or a URL path. Ids are opaque: a
            /// client-supplied value that was never issued simply matches nothing.
            pub fn from_string(value: impl Into<String>) -> Self {
                Self(value.into())
            }

            pub fn as_str(&self) -> &str {
                &self.0
            }

            /// True when the value has the shape of an id this server issues
            /// (prefix + 32 lowercase hex digits); used before an id touches a filesystem path.
            pub fn is_well_formed(&self) -> bool {
                self.0
                    .strip_prefix($prefix)
                    .is_some_and(|rest| rest.len() == 32 && rest.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)))
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }
    };
}

id_type!(
    /// A session, scoped to one tenant.
    SessionId,
    "ses_"
);
id_type!(
    /// One prompt's work inside a session.
    RunId,
    "run_"
);
id_type!(
    /// A persisted approval request.
    ApprovalId,
    "apr_"
);
id_type!(
    /// A spilled (full) tool output kept as evidence.
    OutputId,
    "out_"
);
id_type!(
    /// A stored permission grant.
    GrantId,
    "grt_"
);

/// The tenant a request acts for. Only ever taken from a verified token claim.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct TenantId(String);

impl TenantId {
    pub fn new(value: impl Into<String>) -> Self {
        Self(value.into())
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for TenantId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_ids_are_well_formed_and_distinct() {
        let a = SessionId::generate();
        let b = SessionId::generate();
        assert!(a.is_well_formed(), "{a}");
        assert_ne!(a, b);
        assert!(!SessionId::from_string("ses_../../etc").is_well_formed());
        assert!(!SessionId::from_string(RunId::generate().as_str()).is_well_formed());
    }
}

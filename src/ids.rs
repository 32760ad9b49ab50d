//! Identifier newtypes. Every id that names a stored object is issued by the server (D10):
//! random, unguessable, prefixed by kind, and never derived from client input.
//!
//! An id is a UUID of version 7: the millisecond it was issued, then 74 random bits (the
//! part that makes it unguessable; 2^74 candidates per millisecond). The time in front makes
//! ids issued together sort together, so the rows keyed by them — a session's events and
//! history are keyed by its id — land in the same B-tree pages as those of the other sessions
//! active at the same time, instead of one random page each: a group commit writes far fewer
//! pages, and the pages a busy server touches stay in cache. When an id was issued is not a
//! secret (every object shows its `created_at`).

use serde::{Deserialize, Serialize};
use std::fmt;

/// A version 7 UUID whose random part comes from the operating system's generator (the
/// random bits of a version 4 UUID, at the same positions).
fn time_ordered_uuid() -> uuid::Uuid {
    let random = uuid::Uuid::new_v4();
    let bytes: &[u8; 10] = random.as_bytes()[6..]
        .try_into()
        .expect("a UUID has 16 bytes");
    let millis = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |since| since.as_millis() as u64);
    uuid::Builder::from_unix_timestamp_millis(millis, bytes).into_uuid()
}

macro_rules! id_type {
    ($(#[$doc:meta])* $name:ident, $prefix:literal) => {
        $(#[$doc])*
        #[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
        #[serde(transparent)]
        pub struct $name(String);

        impl $name {
            /// The prefix every server-issued id of this kind starts with.
            pub const PREFIX: &'static str = $prefix;

            /// Issues a fresh id: the current millisecond, then 74 random bits (see the
            /// module doc).
            pub fn generate() -> Self {
                Self(format!("{}{}", $prefix, time_ordered_uuid().simple()))
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

    /// Tenant ids become part of store keys, (hashed) paths and, on Postgres, the literal of
    /// the row-level-security setting: 1 to 128 letters, digits and `- _ . : @`.
    pub fn is_well_formed(tenant: &str) -> bool {
        !tenant.is_empty()
            && tenant.len() <= 128
            && tenant
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b':' | b'@'))
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
    fn ids_issued_later_sort_later_and_keep_74_random_bits() {
        let first = SessionId::generate();
        std::thread::sleep(std::time::Duration::from_millis(2));
        let later: Vec<SessionId> = (0..1_000).map(|_| SessionId::generate()).collect();
        assert!(later.iter().all(|id| *id > first && id.is_well_formed()));
        let uuid = |id: &SessionId| {
            uuid::Uuid::parse_str(id.as_str().strip_prefix(SessionId::PREFIX).unwrap()).unwrap()
        };
        assert_eq!(uuid(&first).get_version_num(), 7);
        // Issued in the same millisecond or not, no two share their random part.
        let random: std::collections::HashSet<[u8; 10]> = later
            .iter()
            .map(|id| uuid(id).as_bytes()[6..].try_into().unwrap())
            .collect();
        assert_eq!(random.len(), later.len());
    }

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

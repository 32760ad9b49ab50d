//! The dialect layer: what differs between the two databases, written once per backend
//! (`postgres.rs`: the row-level-security role and tenant setting, LISTEN/NOTIFY;
//! `sqlite.rs`: timestamps and JSON as text), and the helpers both share.

use chrono::{DateTime, SubsecRound, Utc};
use std::time::Duration;

pub(in crate::store) mod postgres;
pub(in crate::store) mod sqlite;

/// Now, at the microsecond precision both databases keep.
pub(in crate::store) fn now() -> DateTime<Utc> {
    Utc::now().trunc_subsecs(6)
}

/// A lease duration as a timestamp offset (saturating at a day).
pub(in crate::store) fn lease_span(lease: Duration) -> chrono::Duration {
    chrono::Duration::from_std(lease.min(Duration::from_secs(86_400)))
        .unwrap_or_else(|_| chrono::Duration::days(1))
}

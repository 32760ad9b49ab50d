//! The usage ledger: its rows, written with each append, and their sums and reports.

pub(in crate::store) mod postgres;
pub(in crate::store) mod sqlite;

use crate::usage::{SUMS_SQL, UsageScope};

/// The totals of `scope`'s rows: the statement (`$1` tenant, then [`UsageScope::filter`]'s
/// parameters) and the session and run to bind after the tenant.
pub(in crate::store) fn totals_sql(scope: UsageScope<'_>) -> (String, &str, Option<&str>) {
    let (filter, session, run) = scope.filter();
    let sql = format!("SELECT {SUMS_SQL} FROM usage_records WHERE tenant_id = $1 AND {filter}");
    (sql, session, run)
}

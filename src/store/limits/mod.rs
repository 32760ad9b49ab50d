//! Tenant limits on what a replica keeps open: holds and measured workspace bytes.

pub(in crate::store) mod local_holds;
pub(in crate::store) mod postgres;
pub(in crate::store) mod sqlite;

use crate::limits::{Limit, LimitExceeded};
use crate::store::StoreResult;

/// `TenantLimit` when `count` things already reach `limit`'s `max`.
pub(in crate::store) fn over(limit: Limit, max: u32, count: i64) -> StoreResult<()> {
    if count >= i64::from(max) {
        return Err(LimitExceeded {
            limit,
            max: u64::from(max),
        }
        .into());
    }
    Ok(())
}

/// The workspace bytes of a tenant's open sessions, kept by triggers (migration 0019; on
/// Postgres in up to 16 shards, 0028, so the sum): `$1` tenant.
pub(in crate::store) const TENANT_WORKSPACE_BYTES: &str = "SELECT COALESCE((SELECT \
     CAST(SUM(bytes) AS BIGINT) FROM tenant_workspace_bytes WHERE tenant_id = $1), 0)";

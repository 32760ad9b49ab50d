//! Tenant limits on what a replica keeps open: holds and measured workspace bytes.

pub(in crate::store) mod postgres;
pub(in crate::store) mod sqlite;

/// The workspace bytes of a tenant's open sessions, kept by triggers (migration 0019): `$1`
/// tenant.
pub(in crate::store) const TENANT_WORKSPACE_BYTES: &str = "SELECT COALESCE((SELECT bytes FROM \
     tenant_workspace_bytes WHERE tenant_id = $1), 0)";

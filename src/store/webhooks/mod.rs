//! Outbound webhooks: subscriptions and the outbox of deliveries.

/// The `tenants` CTE both stores' outbox statements start from: the tenants with pending
/// deliveries (and a last `NULL` row), found by a loose scan of
/// `webhook_deliveries_tenant_due` — one index probe per tenant, never a tenant's backlog
/// (migrations 0033 / 0027).
macro_rules! pending_tenants_cte {
    () => {
        "WITH RECURSIVE tenants (tenant_id) AS ( \
             SELECT min(tenant_id) FROM webhook_deliveries WHERE status = 'pending' \
             UNION ALL \
             SELECT (SELECT min(d.tenant_id) FROM webhook_deliveries d \
                     WHERE d.status = 'pending' AND d.tenant_id > t.tenant_id) \
             FROM tenants t WHERE t.tenant_id IS NOT NULL) "
    };
}

pub(in crate::store) mod postgres;
pub(in crate::store) mod sqlite;

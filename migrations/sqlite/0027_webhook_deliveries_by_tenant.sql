-- The outbox worker shares its slots among tenants (`store::webhooks`, the claim): it finds the
-- tenants with pending deliveries by a loose scan of `webhook_deliveries_tenant_due` (one index
-- probe per tenant) and reads each tenant's oldest due deliveries up to that tenant's room, so
-- one tenant's backlog is never scanned nor served ahead of another tenant's deliveries. When
-- nothing more can be claimed, the worker sleeps until the next delivery comes due (the `due`
-- index) or a claim's lease ends: `webhook_deliveries_leased` holds only the claimed rows (an
-- attempt's outcome clears `lease_until`), so that minimum is read without a scan.
CREATE INDEX webhook_deliveries_tenant_due ON webhook_deliveries (tenant_id, next_attempt_at)
    WHERE status = 'pending';
CREATE INDEX webhook_deliveries_leased ON webhook_deliveries (lease_until)
    WHERE lease_until IS NOT NULL;

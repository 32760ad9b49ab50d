-- The tenant's running spend totals in shards. Every append that records a model call adds to
-- the tenant's day and month rows, and a row added to stays locked until its transaction has
-- committed (its WAL flushed): with one row per period, every append of a tenant with usage
-- waited for the one before it, so a busy tenant's turns went one commit at a time. Now each
-- period has up to 16 rows (`shard`, chosen from the session id), added to independently and
-- summed when read; the sum is the same total as before.
ALTER TABLE tenant_spend ADD COLUMN shard SMALLINT NOT NULL DEFAULT 0;
ALTER TABLE tenant_spend DROP CONSTRAINT tenant_spend_pkey;
ALTER TABLE tenant_spend ADD PRIMARY KEY (tenant_id, period, period_key, shard);

-- An append's events, history and usage rows no longer each check that their session exists.
-- A foreign key is a trigger per inserted row (a query of the session's row under a lock of
-- its own, run through the executor each time): at 33 events, ~8 messages and 4 usage rows
-- per run it was the largest single part of Postgres' work for a run (15 % of its
-- instructions). Every statement that inserts such rows first updates the session's row, by
-- id and tenant, in the same statement or transaction (`store::events`: the one-statement
-- append inserts only from that update's row; the transaction path answers `NotFound` when
-- the update matched nothing), so the session exists and stays locked until the commit.
-- The server never deletes a session (closing is a status); a session deleted by an operator
-- still takes its events, history and usage rows with it, now by a trigger.
ALTER TABLE events DROP CONSTRAINT events_session_id_fkey;
ALTER TABLE messages DROP CONSTRAINT messages_session_id_fkey;
ALTER TABLE usage_records DROP CONSTRAINT usage_records_session_id_fkey;

CREATE FUNCTION remove_session_history() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM events WHERE session_id = OLD.id;
    DELETE FROM messages WHERE session_id = OLD.id;
    DELETE FROM usage_records WHERE session_id = OLD.id;
    RETURN OLD;
END;
$$;
CREATE TRIGGER sessions_history_removed BEFORE DELETE ON sessions
    FOR EACH ROW EXECUTE FUNCTION remove_session_history();

-- Lookups of one row by its id stay lookups of one row, whatever the planner knows.
-- `sessions_tenant_active` has had no reader since the open-session count became a row (0018)
-- and the idle sweep got its own index (0026), but a session's read by id, tenant and
-- `status = 'active'` (a run's admission, `norma_create_run`) could be planned on it — the
-- partial index matches the status, row-level security adds the tenant — and then read every
-- open session of the tenant to find one (seen in a generic plan made while the table had no
-- statistics: 320 rows read for one). The runs' unfinished index gains the run's id for the
-- same reason: a write's lease check (`id`, owner, fence, `status = 'running'`) planned on it
-- read every running run of the tenant (up to `concurrent_runs`); now it finds the one.
DROP INDEX sessions_tenant_active;
CREATE INDEX runs_tenant_unfinished_by_id ON runs (tenant_id, status, id)
    WHERE status IN ('queued', 'running');
DROP INDEX runs_tenant_unfinished;
ALTER INDEX runs_tenant_unfinished_by_id RENAME TO runs_tenant_unfinished;

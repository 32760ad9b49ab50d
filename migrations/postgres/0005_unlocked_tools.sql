-- Deferred tools a session has unlocked (N12): they stay unlocked for the session's later runs
-- and across restarts.

CREATE TABLE session_unlocked_tools (
    session_id TEXT NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
    tenant_id  TEXT NOT NULL,
    tool_name  TEXT NOT NULL,
    created_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    PRIMARY KEY (session_id, tool_name)
);

GRANT SELECT, INSERT, UPDATE, DELETE ON session_unlocked_tools TO norma_app;
ALTER TABLE session_unlocked_tools ENABLE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON session_unlocked_tools TO norma_app
    USING (tenant_id = current_setting('norma.tenant_id', true))
    WITH CHECK (tenant_id = current_setting('norma.tenant_id', true));

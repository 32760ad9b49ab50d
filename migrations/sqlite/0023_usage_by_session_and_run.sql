-- A run's and a session's usage totals read through one index on (session_id, run_id) (a
-- run's total names its session too), instead of one index per column: each usage row (one
-- per model call) writes one index entry fewer. The index also serves the cascade from a
-- deleted session.
CREATE INDEX usage_records_session_run ON usage_records (session_id, run_id);
DROP INDEX usage_records_run;
DROP INDEX usage_records_session;

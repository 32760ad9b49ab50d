-- The idle sweep reads `active_at`, a clock an append moves only when it was set in an
-- earlier second (`store::sessions::active_at_after_append`), instead of `updated_at`, which
-- every append moves:
-- the index the sweep reads (`sessions_idle_active`) was rewritten, one page to the WAL, at
-- nearly every commit of a run. A new session's `active_at` is its creation time.
ALTER TABLE sessions ADD COLUMN active_at TEXT NOT NULL DEFAULT '';
UPDATE sessions SET active_at = updated_at;
DROP INDEX sessions_idle_active;
CREATE INDEX sessions_idle_active ON sessions (active_at) WHERE status = 'active';

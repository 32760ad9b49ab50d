-- `workspace.storage = "snapshot"`: the head snapshot of a session's workspace (the id of a
-- manifest in the object store, the hex SHA-256 of its bytes). Set in the same transaction as
-- the `tool_result` event that carries it, so the files a resumed run restores always match
-- the results it keeps. NULL: no snapshot yet (an empty workspace).
ALTER TABLE sessions ADD COLUMN workspace_snapshot TEXT;

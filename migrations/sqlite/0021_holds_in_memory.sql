-- Holds (open SSE streams, background tasks and shells counted against a tenant's caps) are
-- kept in the server's memory on SQLite: the store is one process's alone, so there is no
-- other replica to count them with, and a row cost every stream two commits (its insert and
-- its delete). Rows left here by an earlier version counted things that ended with it.
DROP TABLE tenant_holds;

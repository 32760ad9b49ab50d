-- A session's approvals are read in pages, oldest first, from the one a client last read
-- (`GET /v1/sessions/{id}/approvals?after=&limit=`): this index gives them in that order, so a
-- page reads its rows and no more, whatever the session's audit trail holds.
CREATE INDEX approvals_session_created ON approvals (session_id, created_at, id);

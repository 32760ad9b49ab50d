-- A resumed run asks whether it requested approval for a call before the restart: it reads
-- that one request (`store::approvals::RUN_REQUEST`) by the call's id through this index,
-- instead of every approval of the session, inputs included.
CREATE INDEX approvals_tool_use ON approvals (session_id, tool_use_id);

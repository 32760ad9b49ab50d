//! Approvals (a tool call waiting for a decision) and the grants a decision can leave behind.

pub(in crate::store) mod postgres;
pub(in crate::store) mod sqlite;

pub(in crate::store) const APPROVAL_COLUMNS: &str = "id, session_id, run_id, tool_use_id, tool_name, input, input_sha256, \
     reason, status, decided_by, decided_at, decision_reason, updated_input, grant_id, expires_at, created_at";

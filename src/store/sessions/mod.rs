//! Sessions: create, read, list, close, and the sweeps over them (idle, open counts, last
//! sequence numbers, the workspace snapshot head).

pub(in crate::store) mod postgres;
pub(in crate::store) mod sqlite;

pub(in crate::store) const SESSION_COLUMNS: &str = "id, tenant_id, config, status, created_at, updated_at, closed_at, \
     last_event_seq";

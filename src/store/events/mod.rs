//! A session's history: the append of events, messages and outputs in one transaction, and
//! their reads.

use crate::message::Role;
use crate::store::{
    AppendBatch, AppendResult, EventRecord, MessageRecord, StoreError, StoreResult,
};
use chrono::{DateTime, Utc};

pub(in crate::store) mod postgres;
pub(in crate::store) mod sqlite;

pub(in crate::store) fn role_str(role: Role) -> &'static str {
    match role {
        Role::User => "user",
        Role::Assistant => "assistant",
    }
}

pub(in crate::store) fn parse_role(role: &str) -> StoreResult<Role> {
    match role {
        "user" => Ok(Role::User),
        "assistant" => Ok(Role::Assistant),
        other => Err(StoreError::Internal(format!("unknown role {other}"))),
    }
}

/// The records an append writes, numbered from the first free sequence numbers.
pub(in crate::store) fn build_append_result(
    batch: &AppendBatch,
    first_event: i64,
    first_message: i64,
    created_at: DateTime<Utc>,
) -> AppendResult {
    AppendResult {
        events: batch
            .events
            .iter()
            .zip(first_event..)
            .map(|(event, seq)| EventRecord {
                seq,
                kind: event.kind.clone(),
                payload: event.payload.clone(),
                run_id: event.run_id.clone(),
                created_at,
            })
            .collect(),
        messages: batch
            .messages
            .iter()
            .zip(first_message..)
            .map(|(message, seq)| MessageRecord {
                seq,
                role: message.message.role,
                content: message.message.content.clone(),
                run_id: message.run_id.clone(),
                compaction_boundary: message.compaction_boundary,
                created_at,
            })
            .collect(),
    }
}

//! A session's history: the append of events, messages and outputs in one transaction, and
//! their reads. The reads both databases write alike are here once, with the row types that
//! decode them from either; the appends differ (Postgres: `UNNEST` batches under a row lock;
//! SQLite: multi-row inserts on the one writer, grouped by `sqlite_writer`).

use crate::message::{ContentBlock, Role};
use crate::store::{
    EventPayload, EventRecord, MessageRecord, OutputRecord, StoreError, StoreResult,
};
use chrono::{DateTime, Utc};
use serde_json::value::RawValue;
use sqlx::types::Json;
use sqlx::{FromRow, Row};

/// A session's events after a sequence number: `$1` session, `$2` tenant, `$3` after, `$4`
/// limit.
pub(in crate::store) const LIST_EVENTS: &str = "SELECT seq, kind, payload, run_id, created_at \
     FROM events WHERE session_id = $1 AND tenant_id = $2 AND seq > $3 ORDER BY seq LIMIT $4";

/// A session's messages after a sequence number: `$1` session, `$2` tenant, `$3` after, `$4`
/// limit.
pub(in crate::store) const LIST_MESSAGES: &str = "SELECT seq, role, content, run_id, \
     compaction_boundary, created_at FROM messages \
     WHERE session_id = $1 AND tenant_id = $2 AND seq > $3 ORDER BY seq LIMIT $4";

/// One stored tool output: `$1` id, `$2` session, `$3` tenant.
pub(in crate::store) const GET_OUTPUT: &str = "SELECT id, session_id, tool_use_id, tool_name, \
     sha256, size_bytes, content, created_at \
     FROM outputs WHERE id = $1 AND session_id = $2 AND tenant_id = $3";

/// System-level: `$1` created before.
pub(in crate::store) const PURGE_OUTPUTS: &str = "DELETE FROM outputs WHERE created_at < $1";

/// The most bytes one page of events or messages holds, besides its row count: a page stops
/// after the row that brings it to this many bytes of payload (events) or content (messages),
/// so one row larger than this still comes, alone. An event or a message can be large (a
/// model's turn carries up to 14 MiB of text, thinking and tool input), and a page of 1,000
/// such rows read into memory at once would be gigabytes; every reader pages on until a page
/// comes back empty.
pub const PAGE_BYTES: usize = 4 << 20;

/// What a page has taken so far, against its byte bound.
pub(in crate::store) struct PageBytes {
    left: usize,
}

impl PageBytes {
    pub(in crate::store) fn new(max: usize) -> Self {
        Self { left: max }
    }

    /// Adds `row` to `page`, counting its `bytes`; whether the page may take another.
    fn push<T>(&mut self, page: &mut Vec<T>, row: T, bytes: impl Fn(&T) -> usize) -> bool {
        self.left = self.left.saturating_sub(bytes(&row));
        page.push(row);
        self.left > 0
    }

    /// Whether the page has reached its bound.
    pub(in crate::store) fn full(&self) -> bool {
        self.left == 0
    }

    /// Takes the rows of a query's stream, each decoded, until the bound (or their end); the
    /// rows past it are left unread (the connection drops them before its next statement).
    pub(in crate::store) async fn collect_stream<R, T>(
        &mut self,
        mut rows: futures::stream::BoxStream<'_, Result<R, sqlx::Error>>,
        decode: impl Fn(R) -> StoreResult<T>,
        bytes: impl Fn(&T) -> usize,
    ) -> StoreResult<Vec<T>> {
        use futures::TryStreamExt;
        let mut page = Vec::new();
        while let Some(row) = rows.try_next().await? {
            if !self.push(&mut page, decode(row)?, &bytes) {
                break;
            }
        }
        Ok(page)
    }

    /// Takes `rows` until the bound (or their end).
    pub(in crate::store) fn collect<T>(
        &mut self,
        rows: impl IntoIterator<Item = StoreResult<T>>,
        bytes: impl Fn(&T) -> usize,
    ) -> StoreResult<Vec<T>> {
        let mut page = Vec::new();
        for row in rows {
            if !self.push(&mut page, row?, &bytes) {
                break;
            }
        }
        Ok(page)
    }
}

/// The bytes of an event a page counts: its payload's JSON text.
pub(in crate::store) fn event_bytes(event: &EventRecord) -> usize {
    event.payload.as_str().len()
}

/// The bytes of a message a page counts: its content's text, tool inputs as JSON, and images'
/// data (what its JSON is made of, within a few bytes per block).
pub(in crate::store) fn message_bytes(message: &MessageRecord) -> usize {
    message
        .content
        .iter()
        .map(|block| match block {
            ContentBlock::Text { text } => text.len(),
            ContentBlock::Thinking {
                thinking,
                signature,
            } => thinking.len() + signature.as_ref().map_or(0, String::len),
            ContentBlock::RedactedThinking { data } => data.len(),
            ContentBlock::ToolUse { id, name, input } => {
                id.len() + name.len() + crate::json_text::json_len(input)
            }
            ContentBlock::ToolResult(result) => {
                result.content.len()
                    + result
                        .images
                        .iter()
                        .map(|image| image.data.len())
                        .sum::<usize>()
            }
        })
        .sum()
}

/// An event as both databases return it.
#[derive(FromRow)]
pub(in crate::store) struct EventRow {
    pub(super) seq: i64,
    pub(super) kind: String,
    /// The payload's text as stored (`jsonb` on Postgres, `TEXT` on SQLite), checked to be
    /// JSON without being parsed into a tree.
    pub(super) payload: Json<Box<RawValue>>,
    pub(super) run_id: Option<String>,
    pub(super) created_at: DateTime<Utc>,
}

impl From<EventRow> for EventRecord {
    fn from(row: EventRow) -> Self {
        Self {
            seq: row.seq,
            kind: row.kind,
            payload: EventPayload::from_json_text(String::from(Box::<str>::from(row.payload.0))),
            run_id: row.run_id,
            created_at: row.created_at,
        }
    }
}

pub(in crate::store) fn event_from_row<'r, R: Row>(row: &'r R) -> StoreResult<EventRecord>
where
    EventRow: FromRow<'r, R>,
{
    Ok(EventRow::from_row(row)?.into())
}

/// A message as both databases return it.
#[derive(FromRow)]
pub(in crate::store) struct MessageRow {
    seq: i64,
    role: String,
    content: Json<Vec<ContentBlock>>,
    run_id: Option<String>,
    compaction_boundary: bool,
    created_at: DateTime<Utc>,
}

impl TryFrom<MessageRow> for MessageRecord {
    type Error = StoreError;

    fn try_from(row: MessageRow) -> StoreResult<Self> {
        Ok(Self {
            seq: row.seq,
            role: parse_role(&row.role)?,
            content: row.content.0,
            run_id: row.run_id,
            compaction_boundary: row.compaction_boundary,
            created_at: row.created_at,
        })
    }
}

/// A stored tool output as both databases return it.
#[derive(FromRow)]
pub(in crate::store) struct OutputRow {
    id: String,
    session_id: String,
    tool_use_id: String,
    tool_name: String,
    sha256: String,
    size_bytes: i64,
    content: String,
    created_at: DateTime<Utc>,
}

impl From<OutputRow> for OutputRecord {
    fn from(row: OutputRow) -> Self {
        Self {
            id: row.id,
            session_id: row.session_id,
            tool_use_id: row.tool_use_id,
            tool_name: row.tool_name,
            sha256: row.sha256,
            size_bytes: row.size_bytes,
            content: row.content,
            created_at: row.created_at,
        }
    }
}

pub(in crate::store) mod postgres;
mod postgres_single;
pub(in crate::store) mod sqlite;
pub(in crate::store) mod sqlite_append;

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
/// The events of an append as the webhook notices read them.
pub(in crate::store) fn event_views(
    events: &[crate::store::NewEvent],
    first_seq: i64,
) -> impl Iterator<Item = crate::webhooks::EventView<'_>> {
    events
        .iter()
        .zip(first_seq..)
        .map(|(event, seq)| crate::webhooks::EventView {
            kind: &event.kind,
            payload: &event.payload,
            run_id: event.run_id.as_deref(),
            seq,
        })
}

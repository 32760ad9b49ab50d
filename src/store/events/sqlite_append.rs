//! The SQLite append: one batch of a session's events, history, outputs, usage and run end,
//! written inside the group writer's open transaction ([`crate::store::sqlite_writer`]).

use crate::ids::{SessionId, TenantId};
use crate::store::dialect::now;
use crate::store::postgres::role_str;
use crate::store::sqlite::{parse_ts, ts};
use crate::store::sqlite_webhooks::Outbox;
use crate::store::{AppendBatch, Appended, StorableBatch, StoreError, StoreResult};
use crate::usage::sql_count;
use chrono::{DateTime, Utc};
use rusqlite::{OptionalExtension, params};

/// Whether `session` of `tenant` exists (a write that changed nothing: gone, or fenced off?).
pub(in crate::store) fn session_exists(
    db: &rusqlite::Connection,
    tenant: &TenantId,
    session: &SessionId,
) -> StoreResult<bool> {
    Ok(db
        .prepare_cached("SELECT 1 FROM sessions WHERE id = ? AND tenant_id = ?")?
        .exists(params![session.as_str(), tenant.as_str()])?)
}

/// One append inside an open transaction.
pub(in crate::store) fn append_in(
    db: &rusqlite::Connection,
    outbox: &Outbox,
    tenant: &TenantId,
    session: &SessionId,
    batch: &StorableBatch,
) -> StoreResult<Appended> {
    let created_at = now();
    let created = ts(created_at);
    let event_count = batch.events.len() as i64;
    let message_count = batch.messages.len() as i64;
    if let (true, Some(id)) = (batch.retry, batch.id.as_deref()) {
        // The first attempt may have committed before its answer was lost.
        let row = db
            .prepare_cached(
                "SELECT last_append_id, last_event_seq, last_message_seq, updated_at \
                 FROM sessions WHERE id = ? AND tenant_id = ?",
            )?
            .query_row(params![session.as_str(), tenant.as_str()], |row| {
                Ok((
                    row.get::<_, Option<String>>(0)?,
                    row.get::<_, i64>(1)?,
                    row.get::<_, i64>(2)?,
                    row.get::<_, String>(3)?,
                ))
            })
            .optional()?
            .ok_or(StoreError::NotFound)?;
        let (last_append, last_event, last_message, updated_at) = row;
        if last_append.as_deref() == Some(id) {
            return Ok(Appended {
                first_event: last_event - event_count + 1,
                first_message: last_message - message_count + 1,
                created_at: parse_ts(&updated_at)?,
            });
        }
    }
    // The run's end is written with the fence check; any other append of a leased run checks
    // its fence inside the session's sequence update (one statement, not two).
    let mut fenced_in_update = None;
    if let Some(lease) = &batch.lease {
        match &batch.run_end {
            Some(end) => {
                let held =
                    db.prepare_cached(
                        "UPDATE runs SET status = ?, terminal = ?, ended_at = ?, \
                             lease_expires_at = NULL \
                         WHERE id = ? AND owner = ? AND fence = ? AND status = 'running'",
                    )?
                    .execute(params![
                        end.status.as_str(),
                        end.terminal.to_string(),
                        created,
                        lease.run_id.as_str(),
                        lease.owner,
                        lease.fence,
                    ])? == 1;
                if !held {
                    return Err(StoreError::LeaseLost);
                }
            }
            None => fenced_in_update = Some(lease),
        }
    }
    // No `RETURNING`: SQLite builds a temporary table for its rows; the sequences are read
    // back from the row just written (in the writer's page cache) instead.
    let updated = db
        .prepare_cached(
            "UPDATE sessions SET last_event_seq = last_event_seq + ?1, \
                 last_message_seq = last_message_seq + ?2, updated_at = ?3, last_append_id = ?4, \
                 workspace_snapshot = COALESCE(?5, workspace_snapshot) \
             WHERE id = ?6 AND tenant_id = ?7 \
               AND (?8 IS NULL OR EXISTS (SELECT 1 FROM runs WHERE id = ?8 AND owner = ?9 \
                    AND fence = ?10 AND status = 'running'))",
        )?
        .execute(params![
            event_count,
            message_count,
            created,
            batch.id.as_deref(),
            batch.workspace_snapshot.as_deref(),
            session.as_str(),
            tenant.as_str(),
            fenced_in_update.map(|lease| lease.run_id.as_str()),
            fenced_in_update.map(|lease| lease.owner.as_str()),
            fenced_in_update.map(|lease| lease.fence),
        ])?;
    if updated == 0 {
        // Nothing was written: the session is gone, or the run's lease is another claim's.
        if fenced_in_update.is_none() {
            return Err(StoreError::NotFound);
        }
        return Err(if session_exists(db, tenant, session)? {
            StoreError::LeaseLost
        } else {
            StoreError::NotFound
        });
    }
    let (last_event, last_message, active_at) = db
        .prepare_cached(
            "SELECT last_event_seq, last_message_seq, active_at FROM sessions WHERE id = ?",
        )?
        .query_row(params![session.as_str()], |row| {
            Ok((
                row.get::<_, i64>(0)?,
                row.get::<_, i64>(1)?,
                row.get::<_, String>(2)?,
            ))
        })?;
    move_active_at(db, session, &active_at, &created)?;
    let result = Appended {
        first_event: last_event - event_count + 1,
        first_message: last_message - message_count + 1,
        created_at,
    };
    insert_usage(db, tenant, session, batch, created_at, &created)?;
    if let Some(bytes) = batch.workspace_bytes {
        crate::store::limits::sqlite::record_workspace_bytes_in(
            db, tenant, session, bytes, &created,
        )?;
    }
    insert_events(db, tenant, session, batch, result.first_event, &created)?;
    let notices = crate::webhooks::notices(
        session.as_str(),
        super::event_views(&batch.events, result.first_event),
        created_at,
    );
    outbox.insert_sync(db, tenant, session, &created, &notices)?;
    if !batch.messages.is_empty() {
        let mut insert = db.prepare_cached(
            "INSERT INTO messages (session_id, seq, tenant_id, role, content, run_id, \
                     compaction_boundary, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
        )?;
        for (message, seq) in batch.messages.iter().zip(result.first_message..) {
            let content = crate::json_text::json_text(&message.message.content)
                .map_err(|error| StoreError::Internal(error.to_string()))?;
            insert.execute(params![
                session.as_str(),
                seq,
                tenant.as_str(),
                role_str(message.message.role),
                content,
                message.run_id.as_deref(),
                message.compaction_boundary,
                created,
            ])?;
        }
    }
    for output in &batch.outputs {
        db.prepare_cached(
            "INSERT INTO outputs (id, session_id, tenant_id, tool_use_id, tool_name, sha256, \
                 size_bytes, content, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
        )?
        .execute(params![
            output.id.as_str(),
            session.as_str(),
            tenant.as_str(),
            output.tool_use_id,
            output.tool_name,
            output.sha256,
            output.content.len() as i64,
            output.content,
            created,
        ])?;
    }
    Ok(result)
}

/// Event rows per `INSERT` statement at most: a batch's events go in as few statements as
/// that allows, each of one of [`EVENT_ROWS`] shapes (kept prepared by the write connection).
const EVENT_ROWS: usize = 16;

/// The `INSERT` of `rows` events (1 to [`EVENT_ROWS`]). `OR FAIL`: a row that breaks a
/// constraint ends the statement without undoing its earlier rows, so SQLite keeps no
/// statement journal (a copy of every page the statement touches that the transaction had
/// already changed); the append fails as a whole anyway, and its transaction (or the group's)
/// is rolled back.
fn insert_events_sql(rows: usize) -> &'static str {
    static SHAPES: std::sync::OnceLock<Vec<String>> = std::sync::OnceLock::new();
    let shapes = SHAPES.get_or_init(|| {
        (1..=EVENT_ROWS)
            .map(|rows| {
                let values = vec!["(?, ?, ?, ?, ?, ?, ?)"; rows].join(", ");
                format!(
                    "INSERT OR FAIL INTO events (session_id, seq, tenant_id, kind, payload, \
                     run_id, created_at) VALUES {values}"
                )
            })
            .collect()
    });
    &shapes[rows.clamp(1, EVENT_ROWS) - 1]
}

/// The batch's events, numbered from `first`, [`EVENT_ROWS`] to a statement: one statement's
/// setup (its cursors, its place in the statement cache) instead of one per event.
fn insert_events(
    db: &rusqlite::Connection,
    tenant: &TenantId,
    session: &SessionId,
    batch: &StorableBatch,
    first: i64,
    created: &str,
) -> StoreResult<()> {
    let mut seq = first;
    for events in batch.events.chunks(EVENT_ROWS) {
        let mut insert = db.prepare_cached(insert_events_sql(events.len()))?;
        let mut index = 0;
        let mut bind = |value: &dyn rusqlite::ToSql| -> rusqlite::Result<()> {
            index += 1;
            insert.raw_bind_parameter(index, value)
        };
        for event in events {
            bind(&session.as_str())?;
            bind(&seq)?;
            bind(&tenant.as_str())?;
            bind(&event.kind.as_str())?;
            bind(&event.payload.as_str())?;
            bind(&event.run_id.as_deref())?;
            bind(&created)?;
            seq += 1;
        }
        insert.raw_execute()?;
    }
    Ok(())
}

/// Moves the session's `active_at` to `created` when it was set in an earlier second (see
/// [`crate::store::sessions::active_at_after_append`]): within a second, nothing is written,
/// neither the column nor its index.
fn move_active_at(
    db: &rusqlite::Connection,
    session: &SessionId,
    active_at: &str,
    created: &str,
) -> StoreResult<()> {
    let second = crate::store::sessions::ACTIVE_AT_SECOND;
    if *active_at >= created[..second.min(created.len())] {
        return Ok(());
    }
    db.prepare_cached("UPDATE sessions SET active_at = ? WHERE id = ?")?
        .execute(params![created, session.as_str()])?;
    Ok(())
}

/// The usage ledger rows of the batch and the tenant's budget totals they add to, in the
/// append's transaction: the totals always equal the ledger.
fn insert_usage(
    db: &rusqlite::Connection,
    tenant: &TenantId,
    session: &SessionId,
    batch: &AppendBatch,
    at: DateTime<Utc>,
    created: &str,
) -> StoreResult<()> {
    if batch.usage.is_empty() {
        return Ok(());
    }
    let day = at.format("%Y-%m-%d").to_string();
    let mut insert = db.prepare_cached(
        "INSERT INTO usage_records (tenant_id, session_id, run_id, provider, model, \
                 input_tokens, output_tokens, cache_read_tokens, cache_write_tokens, cost_pico, \
                 day, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
    )?;
    for record in &batch.usage {
        insert.execute(params![
            tenant.as_str(),
            session.as_str(),
            record.run_id.as_str(),
            record.provider.as_str(),
            record.model.as_str(),
            sql_count(record.tokens.input_tokens),
            sql_count(record.tokens.output_tokens),
            sql_count(record.tokens.cache_read_tokens),
            sql_count(record.tokens.cache_write_tokens),
            record.cost_pico,
            day,
            created,
        ])?;
    }
    // Both periods' totals (the day's and the month's) in one statement. An integer sum past
    // the largest integer becomes a real in SQLite; MIN brings it back.
    let Some([today, this_month]) = crate::budgets::spend_periods(&batch.usage, at) else {
        return Ok(());
    };
    let mut spend = db.prepare_cached(
        "INSERT INTO tenant_spend (tenant_id, period, period_key, tokens, cost_pico) \
             VALUES (?, ?, ?, ?, ?), (?, ?, ?, ?, ?) \
             ON CONFLICT (tenant_id, period, period_key) DO UPDATE SET \
             tokens = CAST(MIN(tokens + excluded.tokens, 9223372036854775807) AS INTEGER), \
             cost_pico = CAST(MIN(cost_pico + excluded.cost_pico, 9223372036854775807) AS INTEGER)",
    )?;
    spend.execute(params![
        tenant.as_str(),
        today.period.as_str(),
        today.key,
        today.tokens,
        today.cost_pico,
        tenant.as_str(),
        this_month.period.as_str(),
        this_month.key,
        this_month.tokens,
        this_month.cost_pico,
    ])?;
    Ok(())
}

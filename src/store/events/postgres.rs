//! Events on Postgres.

use super::*;
use crate::ids::{OutputId, RunId, SessionId, TenantId};
use crate::store::dialect::now;
use crate::store::dialect::postgres::signal_payload;
use crate::store::postgres::PgStore;
use crate::store::*;
use sqlx::Row;
use sqlx::types::Json;

pub(in crate::store) async fn append(
    store: &PgStore,
    tenant: &TenantId,
    session: &SessionId,
    batch: StorableBatch,
) -> StoreResult<Appended> {
    use super::postgres_single::{Written, fits};
    if fits(&batch) {
        let mut conn = store.tenant_conn(tenant).await?;
        let written = super::postgres_single::append(&mut conn, tenant, session, &batch).await?;
        let result = match written {
            Written::Appended(appended) => Some(Ok(appended)),
            Written::Missed if batch.run_end.is_some() => Some(Err(StoreError::LeaseLost)),
            Written::Missed => {
                let leased = batch.lease.is_some();
                Some(Err(missing_session_or_lease(
                    &mut conn, tenant, session, leased,
                )
                .await))
            }
            // Webhooks may want its events: written with their notices below.
            Written::Subscribed => None,
        };
        conn.commit().await?;
        if let Some(result) = result {
            if let Ok(appended) = &result {
                store.signal_events(tenant, session, appended, batch.events.len());
            }
            return result;
        }
    }
    let mut tx = store.tenant_tx(tenant).await?;
    let (result, notified) = append_in(&mut tx, tenant, session, &batch).await?;
    tx.commit().await?;
    store.signal_events(tenant, session, &result, batch.events.len());
    if notified > 0 {
        store.webhook_wakeup.notify_one();
    }
    Ok(result)
}

impl PgStore {
    /// Tells the other replicas (after the commit) that `count` events from `appended`'s
    /// first were committed; nothing when there were none.
    pub(in crate::store) fn signal_events(
        &self,
        tenant: &TenantId,
        session: &SessionId,
        appended: &Appended,
        count: usize,
    ) {
        if count == 0 || !self.notifier.sending() {
            return;
        }
        self.signal_after_commit(&Signal::Events {
            tenant: tenant.clone(),
            session: session.clone(),
            first: appended.first_event,
            last: appended.first_event + count as i64 - 1,
        });
    }

    /// Queues `signal` for the other replicas, to be sent after the commit it reports (by the
    /// notifier, in a batch, outside any transaction: see `pg_notifier`); nothing while no
    /// other replica shares the store.
    pub(in crate::store) fn signal_after_commit(&self, signal: &Signal) {
        if !self.notifier.sending() {
            return;
        }
        match signal_payload(&self.origin, signal) {
            Ok(payload) => self.notifier.send(payload),
            Err(error) => tracing::warn!(%error, "a signal could not be written"),
        }
    }
}

/// An append's events as the arrays of an `UNNEST` insert.
pub(super) struct EventColumns<'a> {
    pub kinds: Vec<&'a str>,
    pub payloads: Vec<&'a str>,
    pub runs: Vec<Option<&'a str>>,
}

impl<'a> EventColumns<'a> {
    pub fn of(batch: &'a StorableBatch) -> Self {
        Self {
            kinds: batch.events.iter().map(|e| e.kind.as_str()).collect(),
            payloads: batch.events.iter().map(|e| e.payload.as_str()).collect(),
            runs: batch.events.iter().map(|e| e.run_id.as_deref()).collect(),
        }
    }
}

/// An append's messages as the arrays of an `UNNEST` insert (content as JSON text).
pub(super) struct MessageColumns<'a> {
    pub roles: Vec<&'static str>,
    pub contents: Vec<String>,
    pub runs: Vec<Option<&'a str>>,
    pub boundaries: Vec<bool>,
}

impl<'a> MessageColumns<'a> {
    pub fn of(messages: &'a [NewMessage]) -> StoreResult<Self> {
        Ok(Self {
            roles: messages.iter().map(|m| role_str(m.message.role)).collect(),
            contents: messages
                .iter()
                .map(|m| crate::json_text::json_text(&m.message.content))
                .collect::<Result<_, _>>()
                .map_err(|error| StoreError::Internal(error.to_string()))?,
            runs: messages.iter().map(|m| m.run_id.as_deref()).collect(),
            boundaries: messages.iter().map(|m| m.compaction_boundary).collect(),
        })
    }
}

/// Why an append's sequence `UPDATE` matched no row: the session is gone, or (under a lease)
/// the run's lease is.
async fn missing_session_or_lease(
    tx: &mut sqlx::PgConnection,
    tenant: &TenantId,
    session: &SessionId,
    leased: bool,
) -> StoreError {
    if !leased {
        return StoreError::NotFound;
    }
    let exists = sqlx::query("SELECT 1 FROM sessions WHERE id = $1 AND tenant_id = $2")
        .bind(session.as_str())
        .bind(tenant.as_str())
        .fetch_optional(tx)
        .await;
    match exists {
        Ok(Some(_)) => StoreError::LeaseLost,
        Ok(None) => StoreError::NotFound,
        Err(error) => error.into(),
    }
}

/// One append (already made storable) in the caller's tenant-scoped transaction; the result
/// and how many webhook notices it queued (wake the outbox worker and signal the events after
/// the commit).
pub(in crate::store) async fn append_in(
    tx: &mut sqlx::PgConnection,
    tenant: &TenantId,
    session: &SessionId,
    batch: &StorableBatch,
) -> StoreResult<(Appended, u64)> {
    let created_at = now();
    let event_count = batch.events.len() as i64;
    let message_count = batch.messages.len() as i64;
    if let (true, Some(id)) = (batch.retry, batch.id.as_deref()) {
        // The first attempt may have committed before its answer was lost. The row lock
        // waits for that attempt if the server is still finishing it.
        let row = sqlx::query(
            "SELECT last_append_id, last_event_seq, last_message_seq, updated_at \
             FROM sessions WHERE id = $1 AND tenant_id = $2 FOR UPDATE",
        )
        .bind(session.as_str())
        .bind(tenant.as_str())
        .fetch_optional(&mut *tx)
        .await?
        .ok_or(StoreError::NotFound)?;
        if row
            .try_get::<Option<String>, _>("last_append_id")?
            .as_deref()
            == Some(id)
        {
            return Ok((
                Appended {
                    first_event: row.try_get::<i64, _>("last_event_seq")? - event_count + 1,
                    first_message: row.try_get::<i64, _>("last_message_seq")? - message_count + 1,
                    created_at: row.try_get("updated_at")?,
                },
                0,
            ));
        }
    }
    // A write under a lease checks it in the session's sequence UPDATE (`FOR SHARE`: a
    // concurrent claim waits for this write, or this write sees it); a run's last write ends
    // the run in a statement of its own first.
    let mut check = None;
    if let Some(lease) = &batch.lease {
        match &batch.run_end {
            None => check = Some(lease),
            Some(end) => {
                let ended = sqlx::query(
                    "UPDATE runs SET status = $4, terminal = $5, ended_at = $6, \
                         lease_expires_at = NULL \
                     WHERE id = $1 AND owner = $2 AND fence = $3 AND status = 'running'",
                )
                .bind(lease.run_id.as_str())
                .bind(&lease.owner)
                .bind(lease.fence)
                .bind(end.status.as_str())
                .bind(Json(&end.terminal))
                .bind(created_at)
                .execute(&mut *tx)
                .await?
                .rows_affected();
                if ended != 1 {
                    return Err(StoreError::LeaseLost);
                }
            }
        }
    }
    let row = sqlx::query(concat!(
        "UPDATE sessions SET last_event_seq = last_event_seq + $3, \
             last_message_seq = last_message_seq + $4, updated_at = $5, last_append_id = $6, \
             workspace_snapshot = COALESCE($7, workspace_snapshot), ",
        crate::store::sessions::active_at_after_append!(postgres, "$5"),
        " WHERE id = $1 AND tenant_id = $2 AND ($8::text IS NULL OR EXISTS ( \
             SELECT 1 FROM runs WHERE id = $8 AND owner = $9 AND fence = $10 \
                 AND status = 'running' FOR SHARE)) \
         RETURNING last_event_seq, last_message_seq",
    ))
    .bind(session.as_str())
    .bind(tenant.as_str())
    .bind(event_count)
    .bind(message_count)
    .bind(created_at)
    .bind(batch.id.as_deref())
    .bind(batch.workspace_snapshot.as_deref())
    .bind(check.map(|lease| lease.run_id.as_str()))
    .bind(check.map(|lease| lease.owner.as_str()))
    .bind(check.map(|lease| lease.fence))
    .fetch_optional(&mut *tx)
    .await?;
    let Some(row) = row else {
        return Err(missing_session_or_lease(tx, tenant, session, check.is_some()).await);
    };
    let first_event = row.try_get::<i64, _>("last_event_seq")? - event_count + 1;
    let first_message = row.try_get::<i64, _>("last_message_seq")? - message_count + 1;

    let result = Appended {
        first_event,
        first_message,
        created_at,
    };
    crate::store::usage::postgres::insert(tx, tenant, session, &batch.usage, created_at).await?;
    if let Some(bytes) = batch.workspace_bytes {
        crate::store::limits::postgres::record_workspace_bytes_in(
            tx, tenant, session, bytes, created_at,
        )
        .await?;
    }

    let mut notified = 0;
    if !batch.events.is_empty() {
        let seqs: Vec<i64> = (first_event..).take(batch.events.len()).collect();
        let EventColumns {
            kinds,
            payloads,
            runs,
        } = EventColumns::of(batch);
        let notices = crate::webhooks::notices(
            session.as_str(),
            crate::store::event_views(&batch.events, first_event),
            created_at,
        );
        notified = crate::store::webhooks::postgres::insert_events(
            tx, tenant, session, created_at, &seqs, &kinds, &payloads, &runs, &notices,
        )
        .await?;
    }
    if !batch.messages.is_empty() {
        let seqs: Vec<i64> = (first_message..).take(batch.messages.len()).collect();
        let MessageColumns {
            roles,
            contents,
            runs,
            boundaries,
        } = MessageColumns::of(&batch.messages)?;
        sqlx::query(
            "INSERT INTO messages (session_id, tenant_id, created_at, seq, role, content, run_id, \
                 compaction_boundary) \
             SELECT $1, $2, $3, seq, role, content::jsonb, run_id, boundary \
             FROM UNNEST($4::bigint[], $5::text[], $6::text[], $7::text[], $8::bool[]) \
                 AS t(seq, role, content, run_id, boundary)",
        )
        .bind(session.as_str())
        .bind(tenant.as_str())
        .bind(created_at)
        .bind(&seqs)
        .bind(&roles)
        .bind(&contents)
        .bind(&runs)
        .bind(&boundaries)
        .execute(&mut *tx)
        .await?;
    }
    for output in &batch.outputs {
        sqlx::query(
            "INSERT INTO outputs (id, session_id, tenant_id, tool_use_id, tool_name, sha256, \
                 size_bytes, content, created_at) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)",
        )
        .bind(output.id.as_str())
        .bind(session.as_str())
        .bind(tenant.as_str())
        .bind(&output.tool_use_id)
        .bind(&output.tool_name)
        .bind(&output.sha256)
        .bind(output.content.len() as i64)
        .bind(&output.content)
        .bind(created_at)
        .execute(&mut *tx)
        .await?;
    }
    Ok((result, notified))
}

pub(in crate::store) async fn list_events(
    store: &PgStore,
    tenant: &TenantId,
    session: &SessionId,
    after: i64,
    limit: u32,
    max_bytes: usize,
) -> StoreResult<Vec<EventRecord>> {
    let mut conn = store.tenant_conn(tenant).await?;
    let page = {
        let rows = sqlx::query(LIST_EVENTS)
            .bind(session.as_str())
            .bind(tenant.as_str())
            .bind(after)
            .bind(i64::from(limit))
            .fetch(&mut *conn);
        PageBytes::new(max_bytes)
            .collect_stream(rows, |row| event_from_row(&row), event_bytes)
            .await?
    };
    conn.commit().await?;
    Ok(page)
}

pub(in crate::store) async fn list_run_events(
    store: &PgStore,
    tenant: &TenantId,
    session: &SessionId,
    run: &RunId,
    kinds: &[&str],
) -> StoreResult<Vec<EventRecord>> {
    let mut conn = store.tenant_conn(tenant).await?;
    let rows = sqlx::query(
        "SELECT seq, kind, payload, run_id, created_at FROM events \
         WHERE session_id = $1 AND run_id = $2 AND kind = ANY($3) ORDER BY seq",
    )
    .bind(session.as_str())
    .bind(run.as_str())
    .bind(kinds)
    .fetch_all(&mut *conn)
    .await?;
    conn.commit().await?;
    rows.iter().map(event_from_row).collect()
}

pub(in crate::store) async fn list_session_events(
    store: &PgStore,
    tenant: &TenantId,
    session: &SessionId,
    kinds: &[&str],
    after: i64,
    limit: u32,
) -> StoreResult<Vec<EventRecord>> {
    let mut conn = store.tenant_conn(tenant).await?;
    let rows = sqlx::query(
        "SELECT seq, kind, payload, run_id, created_at FROM events \
         WHERE session_id = $1 AND tenant_id = $2 AND seq > $3 AND kind = ANY($4) \
         ORDER BY seq LIMIT $5",
    )
    .bind(session.as_str())
    .bind(tenant.as_str())
    .bind(after)
    .bind(kinds)
    .bind(i64::from(limit))
    .fetch_all(&mut *conn)
    .await?;
    conn.commit().await?;
    rows.iter().map(event_from_row).collect()
}

pub(in crate::store) async fn list_messages(
    store: &PgStore,
    tenant: &TenantId,
    session: &SessionId,
    after: i64,
    limit: u32,
    max_bytes: usize,
) -> StoreResult<Vec<MessageRecord>> {
    let mut conn = store.tenant_conn(tenant).await?;
    let page = {
        let rows = sqlx::query_as::<_, MessageRow>(LIST_MESSAGES)
            .bind(session.as_str())
            .bind(tenant.as_str())
            .bind(after)
            .bind(i64::from(limit))
            .fetch(&mut *conn);
        PageBytes::new(max_bytes)
            .collect_stream(rows, MessageRecord::try_from, message_bytes)
            .await?
    };
    conn.commit().await?;
    Ok(page)
}

pub(in crate::store) async fn get_output(
    store: &PgStore,
    tenant: &TenantId,
    session: &SessionId,
    id: &OutputId,
) -> StoreResult<Option<OutputRecord>> {
    let mut conn = store.tenant_conn(tenant).await?;
    let row: Option<OutputRow> = sqlx::query_as(GET_OUTPUT)
        .bind(id.as_str())
        .bind(session.as_str())
        .bind(tenant.as_str())
        .fetch_optional(&mut *conn)
        .await?;
    conn.commit().await?;
    Ok(row.map(Into::into))
}

pub(in crate::store) async fn purge_outputs(
    store: &PgStore,
    older_than: Duration,
) -> StoreResult<u64> {
    let cutoff = now()
        - chrono::Duration::from_std(older_than)
            .map_err(|error| StoreError::Internal(error.to_string()))?;
    let done = sqlx::query(PURGE_OUTPUTS)
        .bind(cutoff)
        .execute(&store.pool)
        .await?;
    Ok(done.rows_affected())
}

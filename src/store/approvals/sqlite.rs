//! Approvals on SQLite.

use super::*;
use crate::ids::{ApprovalId, GrantId, RunId, SessionId, TenantId};
use crate::store::dialect::now;
use crate::store::dialect::sqlite::{json_column, opt_json_column, opt_ts_column, ts, ts_column};
use crate::store::events::{PAGE_BYTES, PageBytes};
use crate::store::sqlite::SqliteStore;
use crate::store::*;
use rusqlite::OptionalExtension;
use serde_json::Value;

// --- approvals and grants ---
//
// A request, its reads and its decision go through the group writer and the synchronous
// reads on the caller's thread (rusqlite): no hop to a sqlx worker thread on the approval
// round trip.

pub(in crate::store) async fn create_approval(
    store: &SqliteStore,
    tenant: &TenantId,
    mut approval: NewApproval,
    max_pending: u32,
) -> StoreResult<ApprovalRecord> {
    crate::store::storable::approval(&mut approval);
    let tenant = tenant.clone();
    let input = approval.input.to_string();
    let row = store
        .group
        .write(move |db| {
            let at = now();
            // Admission first (a read): a refusal writes nothing and fails alone.
            crate::store::limits::sqlite::admit_approval(db, &tenant, max_pending, at)?;
            db.prepare_cached(&format!(
                "INSERT INTO approvals (id, session_id, tenant_id, run_id, tool_use_id, \
                     tool_name, input, input_sha256, reason, expires_at, created_at) \
                 SELECT ?1, id, tenant_id, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9 FROM sessions \
                     WHERE id = ?10 AND tenant_id = ?11 \
                 RETURNING {APPROVAL_COLUMNS}"
            ))?
            .query_row(
                rusqlite::params![
                    approval.id.as_str(),
                    approval.run_id.as_deref(),
                    approval.tool_use_id,
                    approval.tool_name,
                    input,
                    approval.input_sha256,
                    approval.reason,
                    ts(approval.expires_at),
                    ts(at),
                    approval.session.as_str(),
                    tenant.as_str(),
                ],
                |row| Ok(approval_row(row)),
            )
            .optional()?
            .ok_or(StoreError::NotFound)?
        })
        .await?;
    row.try_into()
}

pub(in crate::store) async fn decide_approval(
    store: &SqliteStore,
    tenant: &TenantId,
    session: &SessionId,
    id: &ApprovalId,
    decision: ApprovalDecision,
) -> StoreResult<Option<ApprovalRecord>> {
    let (tenant, session, id) = (tenant.clone(), session.clone(), id.clone());
    let must_be_live = decision.status != ApprovalStatus::Expired;
    let updated_input = decision.updated_input.as_ref().map(Value::to_string);
    let row = store
        .group
        .write(move |db| {
            let at = ts(now());
            // The conditional update first: when it finds nothing pending, nothing is written.
            let Some(row) = db
                .prepare_cached(DECIDE_APPROVAL)?
                .query_row(
                    rusqlite::named_params! {
                        "$1": id.as_str(),
                        "$2": session.as_str(),
                        "$3": tenant.as_str(),
                        "$4": decision.status.as_str(),
                        "$5": decision.decided_by,
                        "$6": at,
                        "$7": decision.reason.as_deref(),
                        "$8": updated_input.as_deref(),
                        "$9": decision.grant.as_ref().map(|g| g.id.as_str()),
                        "$10": must_be_live,
                    },
                    |row| Ok(approval_row(row)),
                )
                .optional()?
            else {
                return Ok(None);
            };
            let row = row?;
            if let Some(grant) = &decision.grant {
                db.prepare_cached(INSERT_GRANT)?
                    .execute(rusqlite::named_params! {
                        "$1": grant.id.as_str(),
                        "$2": tenant.as_str(),
                        "$3": grant.session.as_str(),
                        "$4": grant.scope.as_str(),
                        "$5": grant.rule,
                        "$6": grant.created_by,
                        "$7": grant.approval_id.as_deref(),
                        "$8": grant.expires_at.map(ts),
                        "$9": at,
                    })?;
            }
            Ok(Some(row))
        })
        .await?;
    row.map(TryInto::try_into).transpose()
}

pub(in crate::store) async fn get_approval(
    store: &SqliteStore,
    tenant: &TenantId,
    session: &SessionId,
    id: &ApprovalId,
) -> StoreResult<Option<ApprovalRecord>> {
    let row = store.reads.read(|db| {
        db.prepare_cached(GET_APPROVAL)?
            .query_row(
                rusqlite::params![id.as_str(), session.as_str(), tenant.as_str()],
                |row| Ok(approval_row(row)),
            )
            .optional()?
            .transpose()
    })?;
    row.map(TryInto::try_into).transpose()
}

pub(in crate::store) async fn run_request(
    store: &SqliteStore,
    tenant: &TenantId,
    session: &SessionId,
    run: &RunId,
    tool_use_id: &str,
    input_sha256: &str,
) -> StoreResult<Option<ApprovalRecord>> {
    let row = store.reads.read(|db| {
        db.prepare_cached(RUN_REQUEST)?
            .query_row(
                rusqlite::params![
                    session.as_str(),
                    tenant.as_str(),
                    run.as_str(),
                    tool_use_id,
                    input_sha256
                ],
                |row| Ok(approval_row(row)),
            )
            .optional()?
            .transpose()
    })?;
    row.map(TryInto::try_into).transpose()
}

/// An [`ApprovalRow`] of [`APPROVAL_COLUMNS`], in order, read by `rusqlite`.
fn approval_row(row: &rusqlite::Row<'_>) -> StoreResult<ApprovalRow> {
    Ok(ApprovalRow {
        id: row.get(0)?,
        session_id: row.get(1)?,
        run_id: row.get(2)?,
        tool_use_id: row.get(3)?,
        tool_name: row.get(4)?,
        input: json_column(row, 5)?,
        input_sha256: row.get(6)?,
        reason: row.get(7)?,
        status: row.get(8)?,
        decided_by: row.get(9)?,
        decided_at: opt_ts_column(row, 10)?,
        decision_reason: row.get(11)?,
        updated_input: opt_json_column(row, 12)?,
        grant_id: row.get(13)?,
        expires_at: ts_column(row, 14)?,
        created_at: ts_column(row, 15)?,
    })
}

pub(in crate::store) async fn list_approvals(
    store: &SqliteStore,
    tenant: &TenantId,
    session: &SessionId,
    status: Option<ApprovalStatus>,
) -> StoreResult<Vec<ApprovalRecord>> {
    let rows = sqlx::query(&format!(
        "SELECT {APPROVAL_COLUMNS} FROM approvals WHERE session_id = ? AND tenant_id = ? \
             AND (? IS NULL OR status = ?) ORDER BY created_at, id"
    ))
    .bind(session.as_str())
    .bind(tenant.as_str())
    .bind(status.map(ApprovalStatus::as_str))
    .bind(status.map(ApprovalStatus::as_str))
    .fetch_all(&store.pool)
    .await?;
    rows.iter().map(approval_from_row).collect()
}

pub(in crate::store) async fn list_approvals_page(
    store: &SqliteStore,
    tenant: &TenantId,
    session: &SessionId,
    status: Option<ApprovalStatus>,
    after: Option<&ApprovalId>,
    limit: u32,
) -> StoreResult<Vec<ApprovalRecord>> {
    let status = status.map(ApprovalStatus::as_str);
    let after = after.map(ApprovalId::as_str);
    // Through `approvals_session_created` (migration 0028).
    let sql = format!(
        "SELECT {APPROVAL_COLUMNS} FROM approvals WHERE session_id = $1 AND tenant_id = $2 \
             AND ($3 IS NULL OR status = $3) \
             AND ($4 IS NULL OR (created_at, id) > \
                 (SELECT created_at, id FROM approvals WHERE id = $4 AND session_id = $1)) \
         ORDER BY created_at, id LIMIT $5"
    );
    let rows = sqlx::query(&sql)
        .bind(session.as_str())
        .bind(tenant.as_str())
        .bind(status)
        .bind(after)
        .bind(i64::from(limit))
        .fetch(&store.pool);
    PageBytes::new(PAGE_BYTES)
        .collect_stream(
            rows,
            |row| approval_from_row(&row),
            ApprovalRecord::page_bytes,
        )
        .await
}

/// The session's live grants, read on the caller's thread (see `sqlite_reads`; `$1`..`$3`
/// bind in order; the partial index `grants_live` keeps it to live grants).
pub(in crate::store) async fn list_grants(
    store: &SqliteStore,
    tenant: &TenantId,
    session: &SessionId,
) -> StoreResult<Vec<GrantRecord>> {
    let rows = store.reads.read(|db| {
        db.prepare_cached(LIVE_GRANTS)?
            .query_and_then(
                rusqlite::params![tenant.as_str(), session.as_str(), ts(now())],
                grant_row,
            )?
            .collect::<StoreResult<Vec<GrantRow>>>()
    })?;
    grants(rows)
}

/// A [`GrantRow`] of [`LIVE_GRANTS`]' columns, in order, read by `rusqlite`.
fn grant_row(row: &rusqlite::Row<'_>) -> StoreResult<GrantRow> {
    grant_row_at(row, 0)
}

/// A [`GrantRow`] of [`LIVE_GRANTS`]' columns, in order from column `first`.
fn grant_row_at(row: &rusqlite::Row<'_>, first: usize) -> StoreResult<GrantRow> {
    Ok(GrantRow {
        id: row.get(first)?,
        session_id: row.get(first + 1)?,
        scope: row.get(first + 2)?,
        rule: row.get(first + 3)?,
        created_by: row.get(first + 4)?,
        approval_id: row.get(first + 5)?,
        expires_at: opt_ts_column(row, first + 6)?,
        created_at: ts_column(row, first + 7)?,
    })
}

/// A point read on the caller's thread (see `sqlite_reads`).
pub(in crate::store) async fn permission_state(
    store: &SqliteStore,
    tenant: &TenantId,
    session: &SessionId,
) -> StoreResult<PermissionState> {
    let rows = store.reads.read(|db| {
        db.prepare_cached(PERMISSION_STATE)?
            .query_and_then(
                rusqlite::params![tenant.as_str(), session.as_str(), ts(now())],
                |row| {
                    let applies = row.get::<_, Option<String>>(2)?.is_some();
                    Ok(PermissionRow {
                        mode: row.get(0)?,
                        previous_mode: row.get(1)?,
                        grant: applies.then(|| grant_row_at(row, 2)).transpose()?,
                    })
                },
            )?
            .collect::<StoreResult<Vec<PermissionRow>>>()
    })?;
    permission_state_from(rows)
}

pub(in crate::store) async fn revoke_grant(
    store: &SqliteStore,
    tenant: &TenantId,
    id: &GrantId,
) -> StoreResult<bool> {
    let done = sqlx::query(REVOKE_GRANT)
        .bind(id.as_str())
        .bind(tenant.as_str())
        .bind(ts(now()))
        .execute(&mut *store.writer.sqlx().await?)
        .await?;
    Ok(done.rows_affected() == 1)
}

pub(in crate::store) async fn consume_grant(
    store: &SqliteStore,
    tenant: &TenantId,
    id: &GrantId,
) -> StoreResult<bool> {
    let done = sqlx::query(CONSUME_GRANT)
        .bind(id.as_str())
        .bind(tenant.as_str())
        .bind(ts(now()))
        .execute(&mut *store.writer.sqlx().await?)
        .await?;
    Ok(done.rows_affected() == 1)
}

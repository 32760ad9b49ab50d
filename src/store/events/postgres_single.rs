//! An append in ONE statement on Postgres: the session's sequence `UPDATE` (with the run's
//! fence check), the run's end, the events, the history, the usage rows and the tenant's spend
//! totals and the session's workspace measurement, as data-modifying
//! `WITH`s of one statement that is its own transaction — one round trip where `BEGIN`, four
//! to seven statements and `COMMIT` were as many. Every `WITH` that writes reads the sequence
//! `UPDATE`'s row, and that `UPDATE` checks the run's fence — for a run's end, by the run's own
//! `UPDATE` (a `FOR SHARE` read of the row that `UPDATE` changed in the same statement would
//! find nothing) — so when it matches nothing (a lost lease, a missing session) nothing at all
//! is written. The statement has the `WITH`s of the writes its batch makes and no others
//! ([`Parts`]).
//!
//! Taken by most appends: a run's turns and its end. An append that is a retry (it reads
//! `last_append_id` first) or spills outputs takes the transaction of `postgres::append_in`
//! instead, and so does one carrying an event that notifies webhooks (its notice bodies name
//! the event's `seq`, known only after the `UPDATE`) when the tenant has a webhook subscription
//! that could want it: the statement then writes nothing and answers [`Written::Subscribed`].

use crate::ids::{SessionId, TenantId};
use crate::store::dialect::now;
use crate::store::*;
use crate::usage::sql_count;
use std::sync::OnceLock;

/// Whether `batch` can be written by [`append`].
pub(in crate::store) fn fits(batch: &AppendBatch) -> bool {
    !batch.retry && batch.outputs.is_empty()
}

/// What [`append`] did.
pub(in crate::store) enum Written {
    Appended(Appended),
    /// The sequence `UPDATE` (or the run's end) matched no row: nothing was written.
    Missed,
    /// The batch notifies webhooks and the tenant subscribes to some: nothing was written
    /// (the transaction path writes it with its notices).
    Subscribed,
}

/// The parts of the statement a batch may leave out: a data-modifying `WITH` is set up (its
/// table opened, with every index of it) and run even when it writes nothing, so each
/// statement carries only the writes its batch makes — a turn's append without a model call
/// neither opens the usage ledger nor the spend totals, only a run's end updates the run, and
/// only a batch whose events notify webhooks reads the subscriptions. At most 32 statements,
/// each written once per process and prepared once per connection.
#[derive(Clone, Copy)]
struct Parts(u8);

impl Parts {
    const MESSAGES: u8 = 1;
    const USAGE: u8 = 2;
    const WORKSPACE: u8 = 4;
    const END: u8 = 8;
    const NOTIFIES: u8 = 16;

    fn of(batch: &StorableBatch, notifies: bool) -> Self {
        let flag = |on: bool, bit: u8| if on { bit } else { 0 };
        Self(
            flag(!batch.messages.is_empty(), Self::MESSAGES)
                | flag(!batch.usage.is_empty(), Self::USAGE)
                | flag(batch.workspace_bytes.is_some(), Self::WORKSPACE)
                | flag(batch.run_end.is_some(), Self::END)
                | flag(notifies, Self::NOTIFIES),
        )
    }

    fn has(self, bit: u8) -> bool {
        self.0 & bit != 0
    }

    /// This shape's statement, written on first use.
    fn statement(self) -> &'static str {
        static STATEMENTS: [OnceLock<String>; 32] = [const { OnceLock::new() }; 32];
        STATEMENTS[usize::from(self.0)].get_or_init(|| self.write())
    }

    /// `$1` session, `$2` tenant, `$3` events, `$4` messages, `$5` now, `$6` append id, `$7`
    /// workspace snapshot, `$8`–`$10` the lease (run, owner, fence) or nulls, `$11`–`$13` the
    /// events' kinds, payloads and runs, `$14`–`$17` the messages' roles, contents, runs and
    /// compaction boundaries, `$18`–`$26` the usage rows (run, provider, model, four token
    /// counts, cost; their UTC day), `$27`–`$30` the spend deltas (period, key, tokens, cost),
    /// `$31`/`$32` the run's end (status and terminal reason), `$33` the session's workspace
    /// bytes, `$34` the session's spend shard. Every shape binds all of them (typed when
    /// prepared), its statement reads those of its parts. (The replicas' signal is sent after
    /// the commit: `store::pg_notifier`.)
    fn write(self) -> String {
        // Only a batch that notifies asks whether the tenant subscribes; the others answer
        // `false` without reading the subscriptions.
        let (subscribed, unsubscribed) = if self.has(Self::NOTIFIES) {
            (
                "EXISTS (SELECT 1 FROM webhook_subscriptions \
                     WHERE tenant_id = $2 AND (session_id IS NULL OR session_id = $1))",
                " AND NOT (SELECT subscribed FROM w)",
            )
        } else {
            ("false", "")
        };
        let mut sql = format!("WITH w AS (SELECT {subscribed} AS subscribed), ");
        let fence = if self.has(Self::END) {
            sql.push_str(&format!(
                "r AS ( \
                     UPDATE runs SET status = $31, terminal = $32::jsonb, ended_at = $5, \
                         lease_expires_at = NULL \
                     WHERE id = $8 AND owner = $9 AND fence = $10 AND status = 'running'\
                         {unsubscribed} \
                     RETURNING 1), "
            ));
            "EXISTS (SELECT 1 FROM r)"
        } else {
            "CASE WHEN $8::text IS NULL THEN true \
                 ELSE EXISTS (SELECT 1 FROM runs WHERE id = $8 AND owner = $9 \
                     AND fence = $10 AND status = 'running' FOR SHARE) END"
        };
        sql.push_str(&format!(
            "s AS ( \
                 UPDATE sessions SET last_event_seq = last_event_seq + $3::bigint, \
                     last_message_seq = last_message_seq + $4::bigint, updated_at = $5, \
                     last_append_id = $6, workspace_snapshot = COALESCE($7, workspace_snapshot), \
                     {active_at} \
                 WHERE id = $1 AND tenant_id = $2{unsubscribed} AND {fence} \
                 RETURNING last_event_seq, last_message_seq), \
             e AS ( \
                 INSERT INTO events (session_id, tenant_id, created_at, seq, kind, payload, \
                     run_id) \
                 SELECT $1, $2, $5, s.last_event_seq - $3::bigint + t.ord, t.kind, \
                     t.payload::jsonb, t.run_id \
                 FROM s, UNNEST($11::text[], $12::text[], $13::text[]) WITH ORDINALITY \
                     AS t(kind, payload, run_id, ord))",
            active_at = crate::store::sessions::active_at_after_append!(postgres, "$5"),
        ));
        if self.has(Self::MESSAGES) {
            sql.push_str(
                ", m AS ( \
                     INSERT INTO messages (session_id, tenant_id, created_at, seq, role, \
                         content, run_id, compaction_boundary) \
                     SELECT $1, $2, $5, s.last_message_seq - $4::bigint + t.ord, t.role, \
                         t.content::jsonb, t.run_id, t.boundary \
                     FROM s, UNNEST($14::text[], $15::text[], $16::text[], $17::bool[]) \
                         WITH ORDINALITY AS t(role, content, run_id, boundary, ord))",
            );
        }
        if self.has(Self::USAGE) {
            sql.push_str(
                ", u AS ( \
                     INSERT INTO usage_records (tenant_id, session_id, run_id, provider, model, \
                         input_tokens, output_tokens, cache_read_tokens, cache_write_tokens, \
                         cost_pico, day, created_at) \
                     SELECT $2, $1, t.run_id, t.provider, t.model, t.input, t.output, \
                         t.cache_read, t.cache_write, t.cost, $26, $5 \
                     FROM s, UNNEST($18::text[], $19::text[], $20::text[], $21::bigint[], \
                         $22::bigint[], $23::bigint[], $24::bigint[], $25::bigint[]) \
                         AS t(run_id, provider, model, input, output, cache_read, cache_write, \
                             cost)), \
                 p AS ( \
                     INSERT INTO tenant_spend (tenant_id, period, period_key, shard, tokens, \
                         cost_pico) \
                     SELECT $2, t.period, t.key, $34::smallint, t.tokens, t.cost \
                     FROM s, UNNEST($27::text[], $28::text[], $29::bigint[], $30::bigint[]) \
                         AS t(period, key, tokens, cost) \
                     ON CONFLICT (tenant_id, period, period_key, shard) DO UPDATE SET \
                         tokens = LEAST(tenant_spend.tokens::numeric + EXCLUDED.tokens, \
                             9223372036854775807)::bigint, \
                         cost_pico = LEAST(tenant_spend.cost_pico::numeric \
                             + EXCLUDED.cost_pico, 9223372036854775807)::bigint)",
            );
        }
        if self.has(Self::WORKSPACE) {
            sql.push_str(
                ", b AS ( \
                     INSERT INTO workspace_usage (session_id, tenant_id, bytes, updated_at) \
                     SELECT $1, $2, $33::bigint, $5 FROM s \
                     ON CONFLICT (session_id) DO UPDATE SET bytes = EXCLUDED.bytes, \
                         updated_at = EXCLUDED.updated_at)",
            );
        }
        sql.push_str(
            " SELECT s.last_event_seq, s.last_message_seq, w.subscribed \
             FROM w LEFT JOIN s ON true",
        );
        sql
    }
}

/// Writes `batch` (which [`fits`]) in one statement on `conn` (outside a transaction: the
/// statement is its own).
pub(in crate::store) async fn append(
    conn: &mut sqlx::PgConnection,
    tenant: &TenantId,
    session: &SessionId,
    batch: &StorableBatch,
) -> StoreResult<Written> {
    debug_assert!(fits(batch));
    let created_at = now();
    let event_count = batch.events.len() as i64;
    let message_count = batch.messages.len() as i64;
    let lease = batch.lease.as_ref();
    let events = super::postgres::EventColumns::of(batch);
    let messages = super::postgres::MessageColumns::of(&batch.messages)?;
    let usage = &batch.usage;
    let count = |f: fn(&crate::usage::TokenCounts) -> u64| -> Vec<i64> {
        usage.iter().map(|r| sql_count(f(&r.tokens))).collect()
    };
    let deltas = crate::budgets::spend_deltas(usage, created_at);
    let notifies = batch
        .events
        .iter()
        .any(|event| crate::webhooks::notifies(&event.kind));
    let end = batch.run_end.as_ref();
    let parts = Parts::of(batch, notifies);
    let row: (Option<i64>, Option<i64>, bool) = sqlx::query_as(parts.statement())
        .bind(session.as_str())
        .bind(tenant.as_str())
        .bind(event_count)
        .bind(message_count)
        .bind(created_at)
        .bind(batch.id.as_deref())
        .bind(batch.workspace_snapshot.as_deref())
        .bind(lease.map(|lease| lease.run_id.as_str()))
        .bind(lease.map(|lease| lease.owner.as_str()))
        .bind(lease.map(|lease| lease.fence))
        .bind(&events.kinds)
        .bind(&events.payloads)
        .bind(&events.runs)
        .bind(&messages.roles)
        .bind(&messages.contents)
        .bind(&messages.runs)
        .bind(&messages.boundaries)
        .bind(usage.iter().map(|r| r.run_id.as_str()).collect::<Vec<_>>())
        .bind(
            usage
                .iter()
                .map(|r| r.provider.as_str())
                .collect::<Vec<_>>(),
        )
        .bind(usage.iter().map(|r| r.model.as_str()).collect::<Vec<_>>())
        .bind(count(|t| t.input_tokens))
        .bind(count(|t| t.output_tokens))
        .bind(count(|t| t.cache_read_tokens))
        .bind(count(|t| t.cache_write_tokens))
        .bind(usage.iter().map(|r| r.cost_pico).collect::<Vec<_>>())
        .bind(created_at.format("%Y-%m-%d").to_string())
        .bind(deltas.iter().map(|d| d.period.as_str()).collect::<Vec<_>>())
        .bind(deltas.iter().map(|d| d.key.as_str()).collect::<Vec<_>>())
        .bind(deltas.iter().map(|d| d.tokens).collect::<Vec<_>>())
        .bind(deltas.iter().map(|d| d.cost_pico).collect::<Vec<_>>())
        .bind(end.map(|end| end.status.as_str()))
        .bind(end.map(|end| end.terminal.to_string()))
        .bind(
            batch
                .workspace_bytes
                .map(|bytes| i64::try_from(bytes).unwrap_or(i64::MAX)),
        )
        .bind(crate::store::budgets::postgres::spend_shard(session))
        .fetch_one(conn)
        .await?;
    Ok(match row {
        (_, _, true) => Written::Subscribed,
        (Some(last_event), Some(last_message), false) => Written::Appended(Appended {
            first_event: last_event - event_count + 1,
            first_message: last_message - message_count + 1,
            created_at,
        }),
        _ => Written::Missed,
    })
}

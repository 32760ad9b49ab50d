//! Rows the store reads and writes.

use crate::ids::{OutputId, SessionId, TenantId};
use crate::message::{Message, Role};
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::ToSchema;

/// A session's lifecycle state.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum SessionStatus {
    Active,
    Closed,
}

impl SessionStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Active => "active",
            Self::Closed => "closed",
        }
    }

    pub fn parse(value: &str) -> Option<Self> {
        match value {
            "active" => Some(Self::Active),
            "closed" => Some(Self::Closed),
            _ => None,
        }
    }
}

/// A session to create. The id is issued by the server before this is built.
#[derive(Clone, Debug)]
pub struct NewSession {
    pub id: SessionId,
    pub tenant: TenantId,
    /// The validated session configuration, as stored.
    pub config: Value,
}

/// A session forked from another (`POST /v1/sessions/{id}/fork`), written in ONE
/// transaction: the new session, its first append (the copied history and the `forked`
/// event) and, for a Noa session, the state and archives it keeps. Nothing of it is stored
/// when any part fails.
#[derive(Debug)]
pub struct NewFork {
    pub session: NewSession,
    /// The session it was forked from (same tenant).
    pub source: SessionId,
    pub batch: AppendBatch,
    pub noa: Option<ForkedNoa>,
    /// The tenant's cap on open sessions (`u32::MAX`: none), checked with the insert.
    pub max_open: u32,
}

/// The Noa part of a fork: the fork's state (version 1) and the ordinals of the source's
/// archives it names, copied with their originals.
#[derive(Debug)]
pub struct ForkedNoa {
    pub state: Value,
    pub archives: Vec<u32>,
}

/// A stored session.
#[derive(Clone, Debug, PartialEq)]
pub struct SessionRecord {
    pub id: SessionId,
    pub tenant: TenantId,
    pub config: Value,
    pub status: SessionStatus,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    pub closed_at: Option<DateTime<Utc>>,
    /// The highest event `seq` written so far (0 before the first event).
    pub last_event_seq: i64,
}

/// A listing cursor that is not one this server issued.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("invalid cursor")]
pub struct InvalidCursor;

/// Position in the newest-first session listing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SessionCursor {
    pub created_at: DateTime<Utc>,
    pub id: SessionId,
}

impl SessionCursor {
    pub fn after(record: &SessionRecord) -> Self {
        Self {
            created_at: record.created_at,
            id: record.id.clone(),
        }
    }

    /// An opaque token for clients.
    pub fn encode(&self) -> String {
        URL_SAFE_NO_PAD.encode(format!(
            "{}|{}",
            self.created_at.timestamp_micros(),
            self.id
        ))
    }

    pub fn decode(token: &str) -> Result<Self, InvalidCursor> {
        let invalid = || InvalidCursor;
        let bytes = URL_SAFE_NO_PAD.decode(token).map_err(|_| invalid())?;
        let text = String::from_utf8(bytes).map_err(|_| invalid())?;
        let (micros, id) = text.split_once('|').ok_or_else(invalid)?;
        let micros: i64 = micros.parse().map_err(|_| invalid())?;
        let created_at = DateTime::from_timestamp_micros(micros).ok_or_else(invalid)?;
        Ok(Self {
            created_at,
            id: SessionId::from_string(id),
        })
    }
}

/// A history message to append.
#[derive(Clone, Debug)]
pub struct NewMessage {
    pub message: Message,
    pub run_id: Option<String>,
    /// Marks a compaction boundary: the provider sees only messages from the last one on.
    pub compaction_boundary: bool,
}

/// A stored history message.
#[derive(Clone, Debug, PartialEq, Serialize, ToSchema)]
pub struct MessageRecord {
    pub seq: i64,
    pub role: Role,
    pub content: Vec<crate::message::ContentBlock>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub run_id: Option<String>,
    pub compaction_boundary: bool,
    pub created_at: DateTime<Utc>,
}

impl MessageRecord {
    pub fn to_message(&self) -> Message {
        Message {
            role: self.role,
            content: self.content.clone(),
        }
    }
}

/// A transcript event to append.
#[derive(Clone, Debug)]
pub struct NewEvent {
    /// The event type, e.g. `run_started`, `tool_result`.
    pub kind: String,
    pub payload: super::EventPayload,
    pub run_id: Option<String>,
}

/// A stored transcript event.
#[derive(Clone, Debug, PartialEq, Serialize, ToSchema)]
pub struct EventRecord {
    /// Per-session, strictly increasing, gap-free.
    pub seq: i64,
    #[serde(rename = "type")]
    pub kind: String,
    #[schema(value_type = Object)]
    pub payload: super::EventPayload,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub run_id: Option<String>,
    // Written as `chrono` writes it, without its per-character path (see `crate::timestamp`).
    #[serde(serialize_with = "crate::timestamp::serialize")]
    pub created_at: DateTime<Utc>,
}

/// A full tool output kept as evidence (D9).
#[derive(Clone, Debug, PartialEq)]
pub struct NewOutput {
    pub id: OutputId,
    pub tool_use_id: String,
    pub tool_name: String,
    pub content: String,
    /// Lowercase hex SHA-256 of `content`'s UTF-8 bytes.
    pub sha256: String,
}

/// A stored spilled output with its provenance.
#[derive(Clone, Debug, PartialEq, Serialize, ToSchema)]
pub struct OutputRecord {
    pub id: String,
    pub session_id: String,
    pub tool_use_id: String,
    pub tool_name: String,
    pub sha256: String,
    pub size_bytes: i64,
    pub content: String,
    pub created_at: DateTime<Utc>,
}

/// What one `Store::append` writes, atomically.
#[derive(Clone, Debug, Default)]
pub struct AppendBatch {
    pub messages: Vec<NewMessage>,
    pub events: Vec<NewEvent>,
    pub outputs: Vec<NewOutput>,
    /// Written on behalf of a run: the write happens only while the run's lease is held with
    /// this fence (`LeaseLost` otherwise), atomically with everything above.
    pub lease: Option<RunLease>,
    /// Ends the run (with `lease`) in the same transaction.
    pub run_end: Option<RunEnd>,
    /// The batch's own id (a run's writer sets one), kept on the session row as its last
    /// committed batch: a write retried after its commit's answer was lost finds it there and
    /// is answered with what that commit stored instead of being stored twice.
    pub id: Option<String>,
    /// Set on a retry of the same batch (same `id`): only then is the session's last batch
    /// compared, so a first attempt costs nothing more.
    pub retry: bool,
    /// Becomes the session's head workspace snapshot in the same transaction (the snapshot
    /// the last `tool_result` event of `events` carries).
    pub workspace_snapshot: Option<String>,
    /// Usage ledger rows of the model calls whose events this batch commits (same
    /// transaction).
    pub usage: Vec<crate::usage::NewUsageRecord>,
    /// The session's workspace bytes measured after the batch's mutating tool calls
    /// (`Store::record_workspace_bytes`, in the same transaction).
    pub workspace_bytes: Option<u64>,
}

/// A run's lifecycle state.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum RunStatus {
    /// Waiting behind the session's current run.
    Queued,
    /// Owned by a replica (it may be waiting for an approval).
    Running,
    Completed,
    Failed,
    Cancelled,
}

impl RunStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Queued => "queued",
            Self::Running => "running",
            Self::Completed => "completed",
            Self::Failed => "failed",
            Self::Cancelled => "cancelled",
        }
    }

    pub fn parse(value: &str) -> Option<Self> {
        match value {
            "queued" => Some(Self::Queued),
            "running" => Some(Self::Running),
            "completed" => Some(Self::Completed),
            "failed" => Some(Self::Failed),
            "cancelled" => Some(Self::Cancelled),
            _ => None,
        }
    }

    pub fn is_finished(self) -> bool {
        !matches!(self, Self::Queued | Self::Running)
    }
}

/// Proof of ownership of a running run: the replica and the fence of its claim.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RunLease {
    pub run_id: crate::ids::RunId,
    pub owner: String,
    pub fence: i64,
}

/// How a run ended.
#[derive(Clone, Debug, PartialEq)]
pub struct RunEnd {
    pub status: RunStatus,
    /// The terminal reason as recorded in the `terminal` event.
    pub terminal: Value,
}

/// A run to persist.
#[derive(Clone, Debug)]
pub struct NewRun {
    pub id: crate::ids::RunId,
    pub session: SessionId,
    pub prompt: String,
}

/// What the idle-expiry sweep needs of an idle session: never its config.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IdleSession {
    pub id: SessionId,
    pub tenant: TenantId,
}

/// What the takeover sweep needs of an unfinished run: never its prompt (it is loaded when
/// the run is claimed and starts).
#[derive(Clone, Debug, PartialEq)]
pub struct UnfinishedRun {
    pub id: String,
    pub session_id: String,
    pub tenant: TenantId,
    pub status: RunStatus,
    pub owner: Option<String>,
    pub lease_expires_at: Option<DateTime<Utc>>,
}

/// A stored run.
#[derive(Clone, Debug, PartialEq, Serialize, ToSchema)]
pub struct RunRecord {
    pub id: String,
    pub session_id: String,
    #[serde(skip)]
    pub tenant: TenantId,
    pub prompt: String,
    pub status: RunStatus,
    /// The replica holding (or last holding) the run's lease.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lease_expires_at: Option<DateTime<Utc>>,
    /// Bumped on every claim; writes of an older claim are refused.
    pub fence: i64,
    /// The terminal reason, once finished.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub terminal: Option<Value>,
    pub created_at: DateTime<Utc>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub started_at: Option<DateTime<Utc>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ended_at: Option<DateTime<Utc>>,
}

impl RunRecord {
    /// What the run counts for in a page of runs (its prompt; the rest is small and bounded):
    /// a page ends after the run that brings it to [`crate::store::PAGE_BYTES`].
    pub fn page_bytes(&self) -> usize {
        self.prompt.len()
    }

    /// The lease this record proves, when it is running.
    pub fn lease(&self) -> Option<RunLease> {
        (self.status == RunStatus::Running).then(|| RunLease {
            run_id: crate::ids::RunId::from_string(self.id.clone()),
            owner: self.owner.clone().unwrap_or_default(),
            fence: self.fence,
        })
    }
}

/// What one `Store::append` wrote.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct AppendResult {
    pub messages: Vec<MessageRecord>,
    pub events: Vec<EventRecord>,
}

/// Where an append's rows landed: the first sequence number of its events and of its
/// messages (the others follow in order) and the time they were written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Appended {
    pub first_event: i64,
    pub first_message: i64,
    pub created_at: DateTime<Utc>,
}

impl Appended {
    /// The records of `batch` as this append stored them (moved out of the batch, not copied).
    pub fn records(self, batch: AppendBatch) -> AppendResult {
        let created_at = self.created_at;
        AppendResult {
            events: batch
                .events
                .into_iter()
                .zip(self.first_event..)
                .map(|(event, seq)| EventRecord {
                    seq,
                    kind: event.kind,
                    payload: event.payload,
                    run_id: event.run_id,
                    created_at,
                })
                .collect(),
            messages: batch
                .messages
                .into_iter()
                .zip(self.first_message..)
                .map(|(message, seq)| MessageRecord {
                    seq,
                    role: message.message.role,
                    content: message.message.content,
                    run_id: message.run_id,
                    compaction_boundary: message.compaction_boundary,
                    created_at,
                })
                .collect(),
        }
    }
}

/// An append batch made storable (see [`crate::store::storable`]) and shared: every attempt
/// of a retried append hands the store the same batch, and the caller gets it back after the
/// commit to build the records, without copying its events and messages. Each event's payload
/// is already JSON text ([`super::EventPayload`]): the store writes that text, and the live
/// channel splices it into the event it sends (see [`crate::runtime::bus`]).
#[derive(Clone, Debug)]
pub struct StorableBatch {
    batch: std::sync::Arc<AppendBatch>,
}

impl StorableBatch {
    pub fn new(mut batch: AppendBatch) -> Self {
        crate::store::storable::append_batch(&mut batch);
        Self {
            batch: std::sync::Arc::new(batch),
        }
    }

    /// The same batch marked as a retry (see [`AppendBatch::retry`]).
    pub fn retried(&self) -> Self {
        let mut batch = self.batch.clone();
        std::sync::Arc::make_mut(&mut batch).retry = true;
        Self { batch }
    }

    /// The batch itself (a copy only while the store still holds it).
    pub fn into_inner(self) -> AppendBatch {
        std::sync::Arc::try_unwrap(self.batch).unwrap_or_else(|shared| (*shared).clone())
    }

    /// The records this batch was stored as.
    pub fn stored(self, appended: Appended) -> AppendResult {
        appended.records(self.into_inner())
    }
}

impl std::ops::Deref for StorableBatch {
    type Target = AppendBatch;

    fn deref(&self) -> &AppendBatch {
        &self.batch
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cursor_round_trips_and_rejects_garbage() {
        let cursor = SessionCursor {
            created_at: DateTime::from_timestamp_micros(1_700_000_000_123_456).unwrap(),
            id: SessionId::generate(),
        };
        assert_eq!(SessionCursor::decode(&cursor.encode()).unwrap(), cursor);
        assert!(SessionCursor::decode("!!!").is_err());
        assert!(SessionCursor::decode(&URL_SAFE_NO_PAD.encode("nopipe")).is_err());
    }
}

/// The state of an approval request.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum ApprovalStatus {
    Pending,
    Allowed,
    Denied,
    Expired,
}

impl ApprovalStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "pending",
            Self::Allowed => "allowed",
            Self::Denied => "denied",
            Self::Expired => "expired",
        }
    }

    pub fn parse(value: &str) -> Option<Self> {
        match value {
            "pending" => Some(Self::Pending),
            "allowed" => Some(Self::Allowed),
            "denied" => Some(Self::Denied),
            "expired" => Some(Self::Expired),
            _ => None,
        }
    }
}

/// An approval request to persist.
#[derive(Clone, Debug)]
pub struct NewApproval {
    pub id: crate::ids::ApprovalId,
    pub session: SessionId,
    pub run_id: Option<String>,
    pub tool_use_id: String,
    pub tool_name: String,
    pub input: Value,
    /// SHA-256 of the canonical JSON of `input`: the approval covers exactly this input.
    pub input_sha256: String,
    pub reason: String,
    pub expires_at: DateTime<Utc>,
}

/// A stored approval request with its audit trail.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct ApprovalRecord {
    pub id: String,
    pub session_id: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub run_id: Option<String>,
    pub tool_use_id: String,
    pub tool_name: String,
    #[schema(value_type = Object)]
    pub input: Value,
    pub input_sha256: String,
    pub reason: String,
    pub status: ApprovalStatus,
    /// The token subject that decided (audit).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub decided_by: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub decided_at: Option<DateTime<Utc>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub decision_reason: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub updated_input: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub grant_id: Option<String>,
    pub expires_at: DateTime<Utc>,
    pub created_at: DateTime<Utc>,
}

impl ApprovalRecord {
    /// What the approval counts for in a page of approvals (its inputs and reasons; the rest
    /// is small and bounded): a page ends after the one that brings it to
    /// [`crate::store::PAGE_BYTES`].
    pub fn page_bytes(&self) -> usize {
        use crate::json_text::json_len;
        json_len(&self.input)
            + self.updated_input.as_ref().map_or(0, json_len)
            + self.reason.len()
            + self.decision_reason.as_ref().map_or(0, String::len)
    }
}

/// How a pending approval is decided.
#[derive(Clone, Debug)]
pub struct ApprovalDecision {
    /// `Allowed`, `Denied` or `Expired`.
    pub status: ApprovalStatus,
    pub decided_by: String,
    pub reason: Option<String>,
    pub updated_input: Option<Value>,
    /// A grant created together with an allow, in the same transaction.
    pub grant: Option<NewGrant>,
}

/// Where a grant applies.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum GrantScope {
    /// The next matching call of the session only.
    Once,
    /// Every later matching call of the session.
    Session,
    /// Every later matching call of every session of the tenant.
    Tenant,
}

impl GrantScope {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Once => "once",
            Self::Session => "session",
            Self::Tenant => "tenant",
        }
    }

    pub fn parse(value: &str) -> Option<Self> {
        match value {
            "once" => Some(Self::Once),
            "session" => Some(Self::Session),
            "tenant" => Some(Self::Tenant),
            _ => None,
        }
    }
}

/// A grant to store.
#[derive(Clone, Debug)]
pub struct NewGrant {
    pub id: crate::ids::GrantId,
    /// The session it was granted in (always set; `Tenant` grants apply beyond it).
    pub session: SessionId,
    pub scope: GrantScope,
    /// A permission rule (`Bash(git push:*)`), validated before it is stored.
    pub rule: String,
    pub created_by: String,
    pub approval_id: Option<String>,
    pub expires_at: Option<DateTime<Utc>>,
}

/// What a run's permission decisions start from, read together: the live grants that apply
/// to the session (as [`Store::list_grants`](crate::store::Store::list_grants)) and its
/// permission-mode override (as [`Store::get_mode_override`](crate::store::Store::get_mode_override)).
#[derive(Clone, Debug, PartialEq)]
pub struct PermissionState {
    pub grants: Vec<GrantRecord>,
    pub mode: Option<crate::store::ModeOverride>,
}

/// A run created running ([`Store::start_run`](crate::store::Store::start_run)) and the
/// permission state of its session it starts from.
#[derive(Clone, Debug, PartialEq)]
pub struct StartedRun {
    pub run: RunRecord,
    pub permissions: PermissionState,
}

/// A stored grant.
#[derive(Clone, Debug, PartialEq, Serialize, ToSchema)]
pub struct GrantRecord {
    pub id: String,
    pub session_id: Option<String>,
    pub scope: GrantScope,
    pub rule: String,
    pub created_by: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub approval_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<DateTime<Utc>>,
    pub created_at: DateTime<Utc>,
}

//! One Noa session while a run goes on: its state (loaded once per run), the blocks of the
//! last view, and the store it commits to. Shared by the context policy (which builds every
//! view) and the `Compress` / `Expand` tools.

use super::ToolNames;
use super::cache::ViewCache;
use super::compress::{self, PlannedRange, RangeRequest, Rejection, codes};
use super::kept::KeptViews;
use super::pipeline::{Item, STEPS, Turn};
use super::settings::NoaSettings;
use super::state::{Block, Calibration, NoaState};
use super::{message_ref, parse_archive_id, parse_message_ref};
use crate::harness::context::ContextPolicy;
use crate::ids::{SessionId, TenantId};
use crate::message::{Message, ViewMessage};
use crate::run_event::{self, RunEvent};
use crate::store::{NewNoaArchive, NoaArchiveRecord, Store, StoreError};
use async_trait::async_trait;
use serde_json::{Value, json};
use std::sync::{Arc, Mutex};

/// What a Noa session needs from the store (a seam for tests that inject failures).
#[async_trait]
pub trait NoaBackend: Send + Sync + 'static {
    /// The stored state and its version (`None` before the first write).
    async fn load(&self) -> Result<Option<(i64, Value)>, StoreError>;
    /// Writes `archives` and the new `state` in one transaction when the stored version is
    /// still `expected` (0: no row yet); returns the new version.
    async fn commit(
        &self,
        archives: &[NewNoaArchive],
        state: &Value,
        expected: i64,
    ) -> Result<i64, StoreError>;
    /// The messages at positions `first..first + count` of the session's history, oldest
    /// first (fewer at its end).
    async fn messages(&self, first: u32, count: u32) -> Result<Vec<Message>, StoreError>;
    /// One archive with its messages.
    async fn archive(&self, ordinal: u32) -> Result<Option<NoaArchiveRecord>, StoreError>;
}

/// The real backend: the server's store, scoped to one tenant's session.
pub struct StoreBackend {
    pub store: Arc<dyn Store>,
    pub tenant: TenantId,
    pub session: SessionId,
}

#[async_trait]
impl NoaBackend for StoreBackend {
    async fn load(&self) -> Result<Option<(i64, Value)>, StoreError> {
        Ok(self
            .store
            .noa_state(&self.tenant, &self.session)
            .await?
            .map(|record| (record.version, record.state)))
    }

    async fn commit(
        &self,
        archives: &[NewNoaArchive],
        state: &Value,
        expected: i64,
    ) -> Result<i64, StoreError> {
        self.store
            .commit_noa(&self.tenant, &self.session, archives, state, expected)
            .await
    }

    /// One read of just the positions asked for: a message's position is its seq − 1 (the
    /// store numbers a session's messages 1, 2, … from `last_message_seq`, and never deletes
    /// one). Should the seqs read not be the ones expected, the whole history is read instead.
    async fn messages(&self, first: u32, count: u32) -> Result<Vec<Message>, StoreError> {
        let records = self
            .store
            .list_messages(&self.tenant, &self.session, i64::from(first), count)
            .await?;
        let expected = |index: usize, seq: i64| seq == i64::from(first) + 1 + index as i64;
        if records.iter().enumerate().all(|(i, r)| expected(i, r.seq)) {
            return Ok(records.iter().map(|record| record.to_message()).collect());
        }
        Ok(self
            .store
            .list_messages(&self.tenant, &self.session, 0, u32::MAX)
            .await?
            .iter()
            .skip(first as usize)
            .take(count as usize)
            .map(|record| record.to_message())
            .collect())
    }

    async fn archive(&self, ordinal: u32) -> Result<Option<NoaArchiveRecord>, StoreError> {
        self.store
            .get_noa_archive(&self.tenant, &self.session, ordinal)
            .await
    }
}

struct Inner {
    state: NoaState,
    version: i64,
    dirty: bool,
    /// Blocks of the last view: what `Compress` validates against.
    blocks: Vec<Block>,
    /// The items vector of the last view, emptied, for the next to reuse.
    items: Vec<Item>,
    /// The blocks kept between requests, so that a request costs what changed since the last.
    cache: ViewCache,
    /// Estimated size of the last view (paired with the provider's exact count).
    last_estimate: u64,
    events: Vec<RunEvent>,
}

/// A live Noa session (see the module doc).
pub struct NoaSession {
    pub settings: NoaSettings,
    read_only: ToolNames,
    backend: Arc<dyn NoaBackend>,
    inner: Mutex<Inner>,
    /// Where the view cache goes when the run ends (and came from when it began).
    keep: Option<Keep>,
}

/// The runtime's kept view caches and the session whose cache this run takes and hands back.
pub struct Keep {
    pub views: Arc<KeptViews>,
    pub session: SessionId,
}

impl Drop for NoaSession {
    /// Hands the view cache back for the session's next run, with the version of the stored
    /// state it was built on. Unsaved changes (the calibration of the run's last response)
    /// do not matter: the cache checks the snapshots and compressions it covers against the
    /// state the next run loads.
    fn drop(&mut self) {
        let Some(keep) = self.keep.take() else {
            return;
        };
        let inner = self.inner.get_mut().unwrap_or_else(|e| e.into_inner());
        let cache = std::mem::take(&mut inner.cache);
        keep.views.put(keep.session, inner.version, cache);
    }
}

/// Longest text one `Expand` call returns, in characters.
pub const EXPAND_PAGE_CHARS: usize = 16_000;

impl NoaSession {
    /// Loads the session's state (one store read, once per run).
    pub async fn load(
        settings: NoaSettings,
        read_only: ToolNames,
        backend: Arc<dyn NoaBackend>,
    ) -> Result<Arc<Self>, StoreError> {
        Self::load_kept(settings, read_only, backend, None).await
    }

    /// [`Self::load`], taking the view cache the session's last run kept in `keep` (when the
    /// state's version still matches) and handing it back there when this session is dropped.
    pub async fn load_kept(
        settings: NoaSettings,
        read_only: ToolNames,
        backend: Arc<dyn NoaBackend>,
        keep: Option<Keep>,
    ) -> Result<Arc<Self>, StoreError> {
        let (version, state) = match backend.load().await? {
            Some((version, value)) => (
                version,
                serde_json::from_value(value)
                    .map_err(|error| StoreError::Internal(format!("noa state: {error}")))?,
            ),
            None => (0, NoaState::default()),
        };
        let cache = keep
            .as_ref()
            .and_then(|keep| keep.views.take(&keep.session, version))
            .unwrap_or_default();
        Ok(Arc::new(Self {
            settings,
            read_only,
            backend,
            inner: Mutex::new(Inner {
                state,
                version,
                dirty: false,
                blocks: Vec::new(),
                items: Vec::new(),
                cache,
                last_estimate: 0,
                events: Vec::new(),
            }),
            keep,
        }))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A copy of the current state (tests, the API).
    pub fn state(&self) -> NoaState {
        self.lock().state.clone()
    }

    /// How many times this session's view cache started over (tests, diagnostics).
    pub fn cache_rebuilds(&self) -> u64 {
        self.lock().cache.rebuilds()
    }

    /// Runs the pipeline over `history` (N23) and returns the view.
    pub fn build_view(
        &self,
        history: &[Arc<Message>],
        hard_limit: Option<u64>,
    ) -> Vec<ViewMessage> {
        let mut inner = self.lock();
        let inner = &mut *inner;
        let before = (
            inner.state.snapshots.len(),
            inner.state.pruned,
            inner.state.hidden,
        );
        let mut turn = Turn::new(&self.settings, &self.read_only, history, &mut inner.state)
            .with_cache(&mut inner.cache);
        if let Some(limit) = hard_limit {
            turn.hard_limit = limit;
        }
        turn.blocks = std::mem::take(&mut inner.blocks);
        turn.items = std::mem::take(&mut inner.items);
        turn.run(&STEPS);
        let messages = turn.messages();
        inner.last_estimate = turn.estimated();
        inner.blocks = std::mem::take(&mut turn.blocks);
        inner.items = std::mem::take(&mut turn.items);
        inner.items.clear();
        inner.events.append(&mut turn.events);
        let after = (
            inner.state.snapshots.len(),
            inner.state.pruned,
            inner.state.hidden,
        );
        inner.dirty |= before != after;
        messages
    }

    /// Writes the state when the last view changed it (new refs, counters, calibration) and
    /// returns the events recorded since the last call.
    pub async fn settle(&self) -> Result<Vec<RunEvent>, StoreError> {
        let (value, version) = {
            let mut inner = self.lock();
            if !inner.dirty {
                return Ok(std::mem::take(&mut inner.events));
            }
            (state_json(&inner.state)?, inner.version)
        };
        let stored = self.backend.commit(&[], &value, version).await?;
        let mut inner = self.lock();
        inner.version = stored;
        inner.dirty = false;
        Ok(std::mem::take(&mut inner.events))
    }

    /// Records the provider's exact input tokens of the request built from the last view.
    pub fn observe_usage(&self, input_tokens: u64) {
        let mut inner = self.lock();
        if input_tokens == 0 || inner.last_estimate == 0 {
            return;
        }
        inner.state.calibration = Some(Calibration {
            estimated: inner.last_estimate,
            exact: input_tokens,
        });
        inner.dirty = true;
    }

    /// Validates and applies one batch (N25, N26). On any failure nothing changes.
    pub async fn compress(&self, batch: &[RangeRequest]) -> Result<String, Rejection> {
        let (plan, next, version, (before, after)) = {
            let inner = self.lock();
            let compressions = &inner.state.compressions;
            let plan = compress::validate(&inner.blocks, compressions, &self.settings, batch)?;
            let next = compress::apply(&inner.state, &plan);
            let tokens = compress::tokens_before_after(&inner.blocks, compressions, &plan);
            (plan, next, inner.version, tokens)
        };
        let store_failed = |error: StoreError| Rejection {
            code: match error {
                StoreError::Conflict(_) => codes::CONFLICT,
                _ => codes::STORE_FAILED,
            },
            range: None,
            message: format!("nothing was compressed: {error}"),
        };
        // One read of the span the fresh positions cover (not the whole history).
        let fresh = || plan.iter().flat_map(|range| range.fresh.iter());
        let (first, span) = match (
            fresh().map(|run| run.0).min(),
            fresh().map(|run| run.1).max(),
        ) {
            (Some(first), Some(last)) => (
                first,
                self.backend
                    .messages(first, last.saturating_sub(first) + 1)
                    .await
                    .map_err(store_failed)?,
            ),
            _ => (0, Vec::new()),
        };
        let archives = archives_of(&plan, &next, first, &span).map_err(store_failed)?;
        let value = state_json(&next).map_err(store_failed)?;
        let stored = self
            .backend
            .commit(&archives, &value, version)
            .await
            .map_err(store_failed)?;
        let first_archive = next.compressions.len() - plan.len();
        let mut inner = self.lock();
        let ranges: Vec<run_event::CompressedRange> = plan
            .iter()
            .zip(&next.compressions[first_archive..])
            .map(|(range, compression)| run_event::CompressedRange {
                archive_id: compression.archive_id.clone(),
                from_ref: range.from_ref.clone(),
                to_ref: range.to_ref.clone(),
                messages: range.positions().count(),
                tokens: range.tokens,
                kept_refs: range.kept.clone(),
            })
            .collect();
        let text = ranges
            .iter()
            .map(|r| {
                format!(
                    "{}..{} -> archive {} ({} messages, {} tokens{})",
                    r.from_ref,
                    r.to_ref,
                    r.archive_id,
                    r.messages,
                    r.tokens,
                    if r.kept_refs.is_empty() {
                        String::new()
                    } else {
                        format!("; protected and kept: {}", r.kept_refs.join(", "))
                    }
                )
            })
            .zip(&next.compressions[first_archive..])
            .map(|(line, compression)| {
                if compression.replaces.is_empty() {
                    line
                } else {
                    format!(
                        "{line}; summaries compressed again: {}",
                        compression.replaces.join(", ")
                    )
                }
            })
            .collect::<Vec<_>>()
            .join("\n");
        // Later ranges of the same turn see these messages as compressed.
        let start = next.compressions.len() - plan.len();
        for (offset, range) in plan.iter().enumerate() {
            for block in inner.blocks.iter_mut() {
                if range
                    .absorbed
                    .iter()
                    .any(|&(s, e)| block.start >= s && block.end <= e)
                {
                    block.absorbed = Some(start + offset);
                }
            }
        }
        inner.state = NoaState {
            // Snapshots, counters and calibration may only have grown since: keep them.
            snapshots: std::mem::take(&mut inner.state.snapshots),
            calibration: inner.state.calibration,
            pruned: inner.state.pruned,
            hidden: inner.state.hidden,
            ..next
        };
        inner.version = stored;
        inner
            .events
            .push(RunEvent::Compression(run_event::Compression {
                ranges,
                tokens_before: before,
                tokens_after: after,
            }));
        Ok(format!(
            "Compressed {} range(s); the context shrinks from about {before} to {after} tokens.\n{text}",
            plan.len()
        ))
    }

    /// Reads an archive (`a3`) or one message (`m42`) back, `offset` characters on, at most
    /// [`EXPAND_PAGE_CHARS`].
    pub async fn expand(&self, reference: &str, offset: usize) -> Result<String, Rejection> {
        let failed = |error: StoreError| Rejection {
            code: codes::STORE_FAILED,
            range: None,
            message: error.to_string(),
        };
        let unknown = || Rejection {
            code: codes::UNKNOWN_REF,
            range: None,
            message: format!("{reference:?} is neither an archive id nor a message ref"),
        };
        let reference = reference.trim();
        let text = if let Some(ordinal) = parse_archive_id(reference) {
            let archive = self
                .backend
                .archive(ordinal)
                .await
                .map_err(failed)?
                .ok_or_else(unknown)?;
            let messages: Vec<ArchivedMessage> =
                serde_json::from_value(archive.messages.unwrap_or_default()).unwrap_or_default();
            let mut text = format!(
                "Archive {} ({}..{}), {} messages:\n",
                archive.id, archive.from_ref, archive.to_ref, archive.message_count
            );
            for message in &messages {
                text.push_str(&render(&message.r#ref, &message.message));
            }
            text
        } else if let Some(position) = parse_message_ref(reference) {
            let message = self.backend.messages(position, 1).await.map_err(failed)?;
            render(&message_ref(position), message.first().ok_or_else(unknown)?)
        } else {
            return Err(unknown());
        };
        Ok(page(&text, offset))
    }
}

#[derive(serde::Serialize, serde::Deserialize)]
struct ArchivedMessage {
    r#ref: String,
    message: Message,
}

fn state_json(state: &NoaState) -> Result<Value, StoreError> {
    serde_json::to_value(state).map_err(|error| StoreError::Internal(error.to_string()))
}

/// The archives of a plan: the original messages of every range, and in the place of an
/// earlier compression it compressed again, that compression's summary message (its ref is
/// the earlier archive's id, whose originals stay readable). `span` holds the history from
/// position `span_start` on, through every fresh position of the plan.
fn archives_of(
    plan: &[PlannedRange],
    next: &NoaState,
    span_start: u32,
    span: &[Message],
) -> Result<Vec<NewNoaArchive>, StoreError> {
    let first = next.compressions.len() - plan.len();
    plan.iter()
        .zip(&next.compressions[first..])
        .map(|(range, compression)| {
            let mut messages = range
                .fresh_positions()
                .map(|position| {
                    span.get(position.wrapping_sub(span_start) as usize)
                        .map(|message| {
                            (
                                position,
                                ArchivedMessage {
                                    r#ref: message_ref(position),
                                    message: message.clone(),
                                },
                            )
                        })
                        .ok_or_else(|| {
                            StoreError::Internal(format!("message {position} is not in history"))
                        })
                })
                .collect::<Result<Vec<_>, _>>()?;
            for earlier in range
                .replaces
                .iter()
                .filter_map(|&c| next.compressions.get(c))
            {
                let at = earlier.absorbed.first().map_or(0, |run| run.0);
                messages.push((
                    at,
                    ArchivedMessage {
                        r#ref: earlier.archive_id.clone(),
                        message: super::pipeline::summary_message(earlier),
                    },
                ));
            }
            messages.sort_by_key(|(position, _)| *position);
            let messages: Vec<ArchivedMessage> =
                messages.into_iter().map(|(_, message)| message).collect();
            Ok(NewNoaArchive {
                ordinal: parse_archive_id(&compression.archive_id).unwrap_or_default(),
                from_ref: range.from_ref.clone(),
                to_ref: range.to_ref.clone(),
                summary: compression.summary.clone(),
                message_count: messages.len() as u32,
                tokens: range.tokens,
                messages: json!(messages),
            })
        })
        .collect()
}

/// One message as text for `Expand`.
fn render(reference: &str, message: &Message) -> String {
    use crate::message::ContentBlock;
    let mut out = format!("[{reference}] {:?}:\n", message.role).to_lowercase();
    for block in &message.content {
        match block {
            ContentBlock::Text { text } => out.push_str(text),
            ContentBlock::Thinking { .. } | ContentBlock::RedactedThinking { .. } => continue,
            ContentBlock::ToolUse { name, input, .. } => {
                out.push_str(&format!("tool call {name} {input}"))
            }
            ContentBlock::ToolResult(result) => {
                out.push_str(&format!("tool result: {}", result.content))
            }
        }
        out.push('\n');
    }
    out
}

/// `text` from character `offset`, at most [`EXPAND_PAGE_CHARS`], with a note on what is left.
fn page(text: &str, offset: usize) -> String {
    let total = text.chars().count();
    let piece: String = text.chars().skip(offset).take(EXPAND_PAGE_CHARS).collect();
    let end = offset.saturating_add(EXPAND_PAGE_CHARS);
    if end < total {
        format!(
            "{piece}\n[{} more characters: call Expand again with offset {end}]",
            total - end
        )
    } else {
        piece
    }
}

/// Noa as the engine's context policy.
pub struct NoaPolicy(pub Arc<NoaSession>);

#[async_trait]
impl ContextPolicy for NoaPolicy {
    fn view(&self, history: &[Arc<Message>]) -> Option<Vec<ViewMessage>> {
        Some(self.0.build_view(history, None))
    }

    /// After a context overflow: the same pipeline, truncating down to the soft limit.
    fn reactive(&self, history: &[Arc<Message>]) -> Option<Vec<ViewMessage>> {
        Some(
            self.0
                .build_view(history, Some(self.0.settings.soft_limit_tokens)),
        )
    }

    async fn after_view(&self) -> Result<Vec<RunEvent>, String> {
        self.0.settle().await.map_err(|error| error.to_string())
    }

    fn observe_usage(&self, input_tokens: u64) {
        self.0.observe_usage(input_tokens);
    }
}

//! Histories and an in-memory backend (with failure injection) for Noa's unit tests.

use super::ToolNames;
use super::session::NoaBackend;
use crate::message::{ContentBlock, Message, Role, ToolResultBlock};
use crate::store::{NewNoaArchive, NoaArchiveRecord, StoreError};
use async_trait::async_trait;
use serde_json::{Value, json};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

pub fn prompt(text: &str) -> Message {
    Message::user_text(text)
}

pub fn reply(text: &str) -> Message {
    Message {
        role: Role::Assistant,
        content: vec![ContentBlock::Text { text: text.into() }],
    }
}

pub fn call(id: &str, name: &str) -> Message {
    Message {
        role: Role::Assistant,
        content: vec![ContentBlock::ToolUse {
            id: id.into(),
            name: name.into(),
            input: json!({"path": "x"}),
        }],
    }
}

pub fn result(id: &str, chars: usize) -> Message {
    Message {
        role: Role::User,
        content: vec![ContentBlock::ToolResult(ToolResultBlock::ok(
            id,
            "r".repeat(chars),
        ))],
    }
}

/// A call of `name` and its result of `chars` characters.
pub fn pair(history: &mut Vec<Message>, name: &str, chars: usize) {
    let id = format!("toolu_{}", history.len());
    history.push(call(&id, name));
    history.push(result(&id, chars));
}

/// `history` as the loop holds it (shared messages).
pub fn shared(history: &[Message]) -> Vec<Arc<Message>> {
    history.iter().cloned().map(Arc::new).collect()
}

/// Copies of the messages of `history` (as a store holds them).
pub fn owned(history: &[Arc<Message>]) -> Vec<Message> {
    history.iter().map(|m| Message::clone(m)).collect()
}

pub fn read_only() -> ToolNames {
    ["Read", "Grep", "Expand"]
        .map(String::from)
        .into_iter()
        .collect()
}

/// The store of one session, in memory; `fail_archives` makes the next archive write fail.
#[derive(Default)]
pub struct MemoryBackend {
    pub history: Mutex<Vec<Message>>,
    pub state: Mutex<Option<(i64, Value)>>,
    pub archives: Mutex<Vec<NewNoaArchive>>,
    pub fail_archives: AtomicBool,
    /// The history reads so far: first position and count.
    pub reads: Mutex<Vec<(u32, u32)>>,
}

#[async_trait]
impl NoaBackend for MemoryBackend {
    async fn load(&self) -> Result<Option<(i64, Value)>, StoreError> {
        Ok(self.state.lock().unwrap().clone())
    }

    async fn commit(
        &self,
        archives: &[NewNoaArchive],
        state: &Value,
        expected: i64,
    ) -> Result<i64, StoreError> {
        let mut stored = self.state.lock().unwrap();
        let version = stored.as_ref().map_or(0, |s| s.0);
        if version != expected {
            return Err(StoreError::Conflict("version".into()));
        }
        if !archives.is_empty() && self.fail_archives.load(Ordering::SeqCst) {
            // Like a transaction whose archive insert failed: nothing is kept.
            return Err(StoreError::Internal("injected archive failure".into()));
        }
        self.archives.lock().unwrap().extend_from_slice(archives);
        *stored = Some((version + 1, state.clone()));
        Ok(version + 1)
    }

    async fn messages(&self, first: u32, count: u32) -> Result<Vec<Message>, StoreError> {
        self.reads.lock().unwrap().push((first, count));
        let history = self.history.lock().unwrap();
        Ok(history
            .iter()
            .skip(first as usize)
            .take(count as usize)
            .cloned()
            .collect())
    }

    async fn archive(&self, ordinal: u32) -> Result<Option<NoaArchiveRecord>, StoreError> {
        Ok(self
            .archives
            .lock()
            .unwrap()
            .iter()
            .find(|a| a.ordinal == ordinal)
            .map(|a| NoaArchiveRecord {
                id: super::archive_id(a.ordinal),
                from_ref: a.from_ref.clone(),
                to_ref: a.to_ref.clone(),
                summary: a.summary.clone(),
                message_count: a.message_count,
                tokens: a.tokens,
                created_at: chrono::Utc::now(),
                messages: Some(a.messages.clone()),
            }))
    }
}

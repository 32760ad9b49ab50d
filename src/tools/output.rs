//! The common output cap (N11, D9): every tool result's text is capped at a head of
//! [`OutputPolicy::head_chars`] characters (chars, never splitting a UTF-8 character). A capped
//! output becomes a [`SpilledOutput`] (the full text with its SHA-256 digest and provenance, to
//! be stored in the same transaction as the result that points at it) and the model reads the
//! head plus a pointer. "Already capped" is the structured `capped` flag of the result, never
//! guessed from text that looks like a marker.

use crate::ids::{OutputId, SessionId, TenantId};
use crate::message::ToolResultBlock;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// The default head cap in characters.
pub const DEFAULT_HEAD_CHARS: usize = 30_000;

/// How tool output is capped.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct OutputPolicy {
    /// Characters of the head the model reads when an output is capped.
    pub head_chars: usize,
    /// Keep the full output as a [`SpilledOutput`] and point to it. Without a spill store the
    /// model only gets the head and a truncation marker.
    #[serde(default = "spill_default")]
    pub spill: bool,
}

fn spill_default() -> bool {
    true
}

impl Default for OutputPolicy {
    fn default() -> Self {
        Self {
            head_chars: DEFAULT_HEAD_CHARS,
            spill: true,
        }
    }
}

/// The full text of a capped output, kept as evidence with its provenance (D9).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SpilledOutput {
    pub id: OutputId,
    pub session_id: SessionId,
    pub tenant: TenantId,
    pub tool_use_id: String,
    pub tool_name: String,
    /// The complete, uncapped text.
    pub content: String,
    /// Lowercase hex SHA-256 of `content`'s UTF-8 bytes.
    pub sha256_hex: String,
    /// `content.len()` in bytes.
    pub size_bytes: u64,
    pub created_at: DateTime<Utc>,
}

/// Where an output came from.
#[derive(Clone, Copy, Debug)]
pub struct Provenance<'a> {
    pub tenant: &'a TenantId,
    pub session_id: &'a SessionId,
    pub tool_name: &'a str,
}

/// Lowercase hex SHA-256 of a text.
pub fn sha256_hex(text: &str) -> String {
    hex::encode(Sha256::digest(text.as_bytes()))
}

/// Caps one result in place. A result whose `capped` flag is already set is left alone; any
/// other text longer than the head is cut at a character boundary, flagged `capped`, and (with
/// `policy.spill`) its full text is returned as a [`SpilledOutput`] whose id the result carries.
pub fn cap_result(
    policy: &OutputPolicy,
    result: &mut ToolResultBlock,
    provenance: Provenance<'_>,
) -> Option<SpilledOutput> {
    // A text of at most `head_chars` bytes has at most as many characters: nothing to cut,
    // without counting them.
    if result.capped || result.content.len() <= policy.head_chars {
        return None;
    }
    let (cut, _) = result.content.char_indices().nth(policy.head_chars)?;
    let total_chars = policy.head_chars + result.content[cut..].chars().count();
    let mut text = String::with_capacity(cut + 120);
    text.push_str(&result.content[..cut]);
    let spill = if policy.spill {
        let id = OutputId::generate();
        text.push_str(&format!(
            "\n… [output truncated: {} of {total_chars} characters shown; full output id {id}]",
            policy.head_chars
        ));
        let content = std::mem::replace(&mut result.content, text);
        Some(SpilledOutput {
            sha256_hex: sha256_hex(&content),
            size_bytes: content.len() as u64,
            id,
            session_id: provenance.session_id.clone(),
            tenant: provenance.tenant.clone(),
            tool_use_id: result.tool_use_id.clone(),
            tool_name: provenance.tool_name.to_owned(),
            content,
            created_at: Utc::now(),
        })
    } else {
        text.push_str(&format!(
            "\n… [output truncated: {} of {total_chars} characters shown]",
            policy.head_chars
        ));
        result.content = text;
        None
    };
    result.capped = true;
    result.output_id = spill.as_ref().map(|spilled| spilled.id.to_string());
    spill
}

#[cfg(test)]
#[path = "output_tests.rs"]
mod tests;

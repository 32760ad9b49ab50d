//! The rows of a tenant's skill registry (`/v1/skills`): one row per tenant and skill name,
//! holding the checked `SKILL.md`, what its front matter says (name, description, tools) and
//! the skill's files. The skills layer parses and checks them (`crate::skills`); the store
//! keeps them as given.

use crate::skills::SkillFile;
use chrono::{DateTime, Utc};

/// A skill to register (already checked).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NewSkill {
    pub name: String,
    pub description: String,
    pub tools: Vec<String>,
    /// The whole `SKILL.md`.
    pub content: String,
    pub files: Vec<SkillFile>,
}

impl NewSkill {
    /// The bytes of the `SKILL.md` and files.
    pub fn size_bytes(&self) -> i64 {
        let files: usize = self.files.iter().map(|f| f.content.len()).sum();
        i64::try_from(self.content.len() + files).unwrap_or(i64::MAX)
    }
}

/// A registered skill, whole.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SkillRecord {
    pub name: String,
    pub description: String,
    pub tools: Vec<String>,
    pub content: String,
    pub files: Vec<SkillFile>,
    pub size_bytes: i64,
    pub created_at: DateTime<Utc>,
}

/// A registered skill without its content and files (what a listing and a run's catalog
/// read).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SkillSummary {
    pub name: String,
    pub description: String,
    pub tools: Vec<String>,
    pub size_bytes: i64,
    pub created_at: DateTime<Utc>,
}

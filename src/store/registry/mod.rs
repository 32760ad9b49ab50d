//! The tenant's named registries (`/v1/mcp-servers`, `/v1/skills`): rows keyed by tenant and
//! name, counted against a tenant limit. One store serves both, parameterised by a
//! [`Registry`] (table, columns, limit, row types); the SQL is written once here, with `$N`
//! placeholders both databases read. The backends differ only in how a new row is counted
//! against the limit (`postgres.rs`: under the tenant's advisory lock; `sqlite.rs`: after a
//! first write takes the write lock).

mod mcp_servers;
mod skills;

pub use mcp_servers::McpServerRecord;
pub use skills::{NewSkill, SkillRecord, SkillSummary};

pub(in crate::store) mod postgres;
pub(in crate::store) mod sqlite;

use crate::limits::{Limit, LimitExceeded};
use crate::skills::SkillFile;
use crate::store::StoreError;
use chrono::{DateTime, Utc};
use serde_json::Value;
use sqlx::types::Json;
use std::marker::PhantomData;

/// One per-tenant registry of named rows: `Row` is what a read of one entry decodes, `Item`
/// what a listing decodes.
pub(in crate::store) struct Registry<Row, Item> {
    table: &'static str,
    /// The columns a read of one entry returns (also what an insert returns).
    columns: &'static str,
    /// The columns a listing returns.
    list_columns: &'static str,
    /// The limit the tenant's count of entries is held to.
    limit: Limit,
    /// How an entry is named in a conflict (`an MCP server`).
    noun: &'static str,
    rows: PhantomData<fn() -> (Row, Item)>,
}

impl<Row, Item> Registry<Row, Item> {
    pub(in crate::store) fn get_sql(&self) -> String {
        format!(
            "SELECT {} FROM {} WHERE tenant_id = $1 AND name = $2",
            self.columns, self.table
        )
    }

    pub(in crate::store) fn list_sql(&self) -> String {
        format!(
            "SELECT {} FROM {} WHERE tenant_id = $1 ORDER BY name LIMIT $2",
            self.list_columns, self.table
        )
    }

    pub(in crate::store) fn delete_sql(&self) -> String {
        format!(
            "DELETE FROM {} WHERE tenant_id = $1 AND name = $2",
            self.table
        )
    }

    pub(in crate::store) fn count_sql(&self) -> String {
        format!("SELECT count(*) FROM {} WHERE tenant_id = $1", self.table)
    }

    /// The tenant has `max` entries (nothing is written).
    pub(in crate::store) fn at_limit(&self, max: u32) -> StoreError {
        LimitExceeded {
            limit: self.limit,
            max: u64::from(max),
        }
        .into()
    }

    /// The name is taken (nothing is written).
    pub(in crate::store) fn taken(&self, name: &str) -> StoreError {
        StoreError::Conflict(format!("{} named `{name}` is registered", self.noun))
    }
}

const MCP_COLUMNS: &str = "name, config, created_at, updated_at";

pub(in crate::store) const MCP_SERVERS: Registry<McpServerRow, McpServerRow> = Registry {
    table: "mcp_servers",
    columns: MCP_COLUMNS,
    list_columns: MCP_COLUMNS,
    limit: Limit::McpServers,
    noun: "an MCP server",
    rows: PhantomData,
};

/// A new server's row: `$1` tenant, `$2` name, `$3` config, `$4` time.
pub(in crate::store) const INSERT_MCP_SERVER: &str = "INSERT INTO mcp_servers (tenant_id, name, config, created_at, updated_at) \
     VALUES ($1, $2, $3, $4, $4) ON CONFLICT (tenant_id, name) DO NOTHING \
     RETURNING name, config, created_at, updated_at";

/// A server's new entry: `$1` tenant, `$2` name, `$3` config, `$4` time.
pub(in crate::store) const REPLACE_MCP_SERVER: &str = "UPDATE mcp_servers SET config = $3, updated_at = $4 \
     WHERE tenant_id = $1 AND name = $2 RETURNING name, config, created_at, updated_at";

pub(in crate::store) const SKILLS: Registry<SkillRow, SkillSummaryRow> = Registry {
    table: "skills",
    columns: "name, description, tools, size_bytes, created_at, content, files",
    list_columns: "name, description, tools, size_bytes, created_at",
    limit: Limit::Skills,
    noun: "a skill",
    rows: PhantomData,
};

/// A new skill's row: `$1` tenant, `$2` name, `$3` description, `$4` tools, `$5` content,
/// `$6` files, `$7` size, `$8` time.
pub(in crate::store) const INSERT_SKILL: &str = "INSERT INTO skills (tenant_id, name, description, tools, content, files, size_bytes, \
     created_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8) \
     ON CONFLICT (tenant_id, name) DO NOTHING \
     RETURNING name, description, tools, size_bytes, created_at, content, files";

/// A registered MCP server as both databases return it (JSON and timestamps decode from
/// `jsonb`/`timestamptz` on Postgres and from text on SQLite).
#[derive(sqlx::FromRow)]
pub(in crate::store) struct McpServerRow {
    name: String,
    config: Json<Value>,
    created_at: DateTime<Utc>,
    updated_at: DateTime<Utc>,
}

impl From<McpServerRow> for McpServerRecord {
    fn from(row: McpServerRow) -> Self {
        Self {
            name: row.name,
            config: row.config.0,
            created_at: row.created_at,
            updated_at: row.updated_at,
        }
    }
}

/// A registered skill without content and files.
#[derive(sqlx::FromRow)]
pub(in crate::store) struct SkillSummaryRow {
    name: String,
    description: String,
    tools: Json<Vec<String>>,
    size_bytes: i64,
    created_at: DateTime<Utc>,
}

impl From<SkillSummaryRow> for SkillSummary {
    fn from(row: SkillSummaryRow) -> Self {
        Self {
            name: row.name,
            description: row.description,
            tools: row.tools.0,
            size_bytes: row.size_bytes,
            created_at: row.created_at,
        }
    }
}

/// A registered skill, whole.
#[derive(sqlx::FromRow)]
pub(in crate::store) struct SkillRow {
    #[sqlx(flatten)]
    summary: SkillSummaryRow,
    content: String,
    files: Json<Vec<SkillFile>>,
}

impl From<SkillRow> for SkillRecord {
    fn from(row: SkillRow) -> Self {
        let summary = SkillSummary::from(row.summary);
        Self {
            name: summary.name,
            description: summary.description,
            tools: summary.tools,
            content: row.content,
            files: row.files.0,
            size_bytes: summary.size_bytes,
            created_at: summary.created_at,
        }
    }
}

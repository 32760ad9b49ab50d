//! The tools a Noa session offers: `Compress` (a batch of ranges with summaries, N25/N26) and
//! `Expand` (read an archive or a message back, paged).

use super::compress::{MAX_RANGES, RangeRequest};
use super::session::NoaSession;
use super::{COMPRESS_TOOL, EXPAND_TOOL};
use crate::permission::SelfDecision;
use crate::tools::{DynTool, Tool, ToolContext, ToolError, ToolOutput};
use async_trait::async_trait;
use serde::Deserialize;
use serde_json::{Value, json};
use std::sync::{Arc, LazyLock};

/// Both tools of a Noa session.
pub fn noa_tools(session: Arc<NoaSession>) -> Vec<DynTool> {
    vec![
        Arc::new(CompressTool {
            session: session.clone(),
        }),
        Arc::new(ExpandTool { session }),
    ]
}

static COMPRESS_SCHEMA: LazyLock<Value> = LazyLock::new(|| {
    json!({
        "type": "object",
        "properties": {
            "ranges": {
                "type": "array",
                "description": format!("1 to {MAX_RANGES} ranges, ascending, not overlapping"),
                "items": {
                    "type": "object",
                    "properties": {
                        "from_ref": {"type": "string", "description": "ref of the first message (e.g. m12)"},
                        "to_ref": {"type": "string", "description": "ref of the last message"},
                        "summary": {"type": "string", "description": "what to keep of the range"}
                    },
                    "required": ["from_ref", "to_ref", "summary"],
                    "additionalProperties": false
                }
            }
        },
        "required": ["ranges"],
        "additionalProperties": false
    })
});

static EXPAND_SCHEMA: LazyLock<Value> = LazyLock::new(|| {
    json!({
        "type": "object",
        "properties": {
            "ref": {"type": "string", "description": "an archive id (a3) or a message ref (m42)"},
            "offset": {"type": "integer", "minimum": 0, "description": "characters to skip"}
        },
        "required": ["ref"],
        "additionalProperties": false
    })
});

struct CompressTool {
    session: Arc<NoaSession>,
}

#[derive(Deserialize)]
struct CompressInput {
    ranges: Vec<RangeRequest>,
}

#[async_trait]
impl Tool for CompressTool {
    fn name(&self) -> &str {
        COMPRESS_TOOL
    }
    fn description(&self) -> &str {
        "Replaces ranges of older messages in your context with your summaries. Each range \
         goes from_ref..to_ref (the [ref m…] markers), starts and ends on whole tool \
         call/result pairs, and must not hold only recent or protected messages. The \
         originals are archived; read them back with Expand. Any invalid range refuses the \
         whole batch with a code (NOA_…) saying why."
    }
    fn input_schema(&self) -> &Value {
        &COMPRESS_SCHEMA
    }
    fn self_decision(&self, _input: &Value) -> SelfDecision {
        // It changes only what the model itself sees; the originals are kept.
        SelfDecision::Allow
    }
    async fn call(&self, input: Value, _ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        let input: CompressInput = serde_json::from_value(input).map_err(|error| {
            ToolError::new(crate::tools::codes::INPUT_SCHEMA_INVALID, error.to_string())
        })?;
        self.session
            .compress(&input.ranges)
            .await
            .map(ToolOutput::text)
            .map_err(|rejection| ToolError::new(rejection.code, rejection.to_string()))
    }
}

struct ExpandTool {
    session: Arc<NoaSession>,
}

#[derive(Deserialize)]
struct ExpandInput {
    r#ref: String,
    #[serde(default)]
    offset: usize,
}

#[async_trait]
impl Tool for ExpandTool {
    fn name(&self) -> &str {
        EXPAND_TOOL
    }
    fn description(&self) -> &str {
        "Reads back the original messages of a compression archive (its id, e.g. a3) or one \
         message by its ref (e.g. m42, for a pruned result), 16,000 characters at a time."
    }
    fn input_schema(&self) -> &Value {
        &EXPAND_SCHEMA
    }
    fn is_read_only(&self, _input: &Value) -> bool {
        true
    }
    fn is_concurrency_safe(&self, _input: &Value) -> bool {
        true
    }
    fn self_decision(&self, _input: &Value) -> SelfDecision {
        SelfDecision::Allow
    }
    async fn call(&self, input: Value, _ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        let input: ExpandInput = serde_json::from_value(input).map_err(|error| {
            ToolError::new(crate::tools::codes::INPUT_SCHEMA_INVALID, error.to_string())
        })?;
        self.session
            .expand(&input.r#ref, input.offset)
            .await
            .map(ToolOutput::text)
            .map_err(|rejection| ToolError::new(rejection.code, rejection.to_string()))
    }
}

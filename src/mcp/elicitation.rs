//! Elicitation: a server's `elicitation/create` during one of its tool calls, asked over the
//! durable approval channel exactly like AskUserQuestion.
//!
//! The request becomes an approval of the call that is running (its `tool_use_id`, the
//! registry tool's name) whose `input` says what it is:
//! `{"kind": "mcp_elicitation", "server", "message", "requested_schema"}`. Whoever answers
//! allows it with `updated_input: {"content": {…}}` — the elicited values, checked against the
//! requested schema (when answered over REST or AG-UI a mismatch is `422` and the request
//! stays pending) — and the server receives `accept` with that content; a deny is `decline`;
//! an expired, cancelled or refused request is `cancel`. An answer cannot add a grant.
//!
//! The call waits for the answer in process, bounded by the server's `timeout_seconds` and
//! the approval's expiry: an elicitation does not park its run (the call is already
//! executing, and a parked run resumes an executing call as `INTERRUPTED`).

use crate::tools::pipeline::{ApprovalAnswer, ApprovalRequest, Approver};
use crate::tools::schema::CompiledSchema;
use rmcp::model::{ElicitRequestParams, ElicitResult, ElicitationAction};
use serde_json::{Value, json};

/// `input.kind` of an elicitation's approval.
pub const KIND: &str = "mcp_elicitation";
/// A longer message is refused (the server gets an error).
pub const MAX_MESSAGE_CHARS: usize = 4000;
/// A larger requested schema (as JSON) is refused.
pub const MAX_SCHEMA_BYTES: usize = 16 * 1024;
/// Larger elicited values (as JSON) are refused.
pub const MAX_CONTENT_BYTES: usize = 64 * 1024;

/// Whether an approval's input is an elicitation's.
pub fn is_elicitation(input: &Value) -> bool {
    input["kind"] == KIND
}

/// The values an answer gives (`updated_input.content`, default `{}`), checked against the
/// schema the server requested (`input.requested_schema` of the approval).
pub fn answer_content(input: &Value, updated_input: Option<&Value>) -> Result<Value, String> {
    let content = updated_input
        .and_then(|updated| updated.get("content"))
        .cloned()
        .unwrap_or_else(|| json!({}));
    if !content.is_object() {
        return Err("`content` must be a JSON object of the elicited values".into());
    }
    if content.to_string().len() > MAX_CONTENT_BYTES {
        return Err(format!(
            "`content` is larger than {MAX_CONTENT_BYTES} bytes"
        ));
    }
    let schema = CompiledSchema::compile(&input["requested_schema"])
        .map_err(|error| format!("the requested schema cannot be used: {error}"))?;
    schema.validate(&content).map_err(|violations| {
        let mut text = "`content` does not match the requested schema:".to_owned();
        for violation in &violations.violations {
            let path = if violation.instance_path.is_empty() {
                "(content)"
            } else {
                violation.instance_path.as_str()
            };
            text.push_str(&format!("\n- {path}: {}", violation.message));
        }
        text
    })?;
    Ok(content)
}

/// The call an elicitation belongs to.
pub struct ElicitingCall<'a> {
    pub server: &'a str,
    pub tool_use_id: &'a str,
    pub tool_name: &'a str,
}

/// Why an elicitation request is refused before anyone is asked (the server gets an error).
pub fn check_request(params: &ElicitRequestParams) -> Result<(String, Value), String> {
    match params {
        ElicitRequestParams::FormElicitationParams {
            message,
            requested_schema,
            ..
        } => {
            if message.chars().count() > MAX_MESSAGE_CHARS {
                return Err(format!(
                    "the message is longer than {MAX_MESSAGE_CHARS} characters"
                ));
            }
            let schema = serde_json::to_value(requested_schema).map_err(|e| e.to_string())?;
            if schema.to_string().len() > MAX_SCHEMA_BYTES {
                return Err(format!(
                    "the requested schema is larger than {MAX_SCHEMA_BYTES} bytes"
                ));
            }
            CompiledSchema::compile(&schema)
                .map_err(|error| format!("the requested schema is not usable: {error}"))?;
            Ok((message.clone(), schema))
        }
        _ => Err("only form elicitation is supported (the client does not open URLs)".into()),
    }
}

/// Asks `approver` for the values and turns its answer into the server's result.
pub async fn ask(
    approver: &dyn Approver,
    call: ElicitingCall<'_>,
    message: String,
    schema: Value,
) -> ElicitResult {
    let input = json!({
        "kind": KIND,
        "server": call.server,
        "message": message,
        "requested_schema": schema,
    });
    let request = ApprovalRequest {
        tool_use_id: call.tool_use_id.to_owned(),
        tool_name: call.tool_name.to_owned(),
        input: input.clone(),
        reason: format!(
            "the MCP server `{}` asks for input during `{}`: {message}",
            call.server, call.tool_name
        ),
    };
    match approver.decide(request).await {
        ApprovalAnswer::Allow { updated_input } => {
            match answer_content(&input, updated_input.as_ref()) {
                Ok(content) => ElicitResult::new(ElicitationAction::Accept).with_content(content),
                Err(error) => {
                    // Only a policy webhook's answer can get here (REST answers are checked).
                    tracing::warn!(server = %call.server, tool_use_id = %call.tool_use_id,
                        %error, "elicitation answer does not fit; cancelled");
                    ElicitResult::new(ElicitationAction::Cancel)
                }
            }
        }
        ApprovalAnswer::Deny { .. } => ElicitResult::new(ElicitationAction::Decline),
        ApprovalAnswer::Expired { .. }
        | ApprovalAnswer::Parked
        | ApprovalAnswer::Refused { .. } => ElicitResult::new(ElicitationAction::Cancel),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn input() -> Value {
        json!({"kind": KIND, "requested_schema": {
            "type": "object",
            "properties": {"name": {"type": "string", "maxLength": 8}},
            "required": ["name"]
        }})
    }

    #[test]
    fn answers_are_checked_against_the_requested_schema() {
        let good = json!({"content": {"name": "Ada"}});
        assert_eq!(
            answer_content(&input(), Some(&good)).unwrap(),
            json!({"name": "Ada"})
        );
        for bad in [
            json!({}),
            json!({"content": {"name": 5}}),
            json!({"content": {"name": "far too long"}}),
            json!({"content": "Ada"}),
        ] {
            assert!(answer_content(&input(), Some(&bad)).is_err(), "{bad}");
        }
        let huge = json!({"content": {"name": "x".repeat(MAX_CONTENT_BYTES)}});
        assert!(
            answer_content(&input(), Some(&huge))
                .unwrap_err()
                .contains("larger than")
        );
    }
}

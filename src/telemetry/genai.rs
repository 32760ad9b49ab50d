//! Spans following the OpenTelemetry GenAI semantic conventions.
//!
//! - `invoke_agent` — one per run (or per stretch of a run on this replica: a resumed run is a
//!   new span), `gen_ai.operation.name = invoke_agent`;
//! - `chat {model}` — one per model call (main responses, recoveries, compaction summaries),
//!   a child of `invoke_agent`, with `gen_ai.provider.name` (and the older `gen_ai.system`),
//!   `gen_ai.request.model`, `gen_ai.response.model`, `gen_ai.response.finish_reasons`,
//!   `gen_ai.usage.input_tokens` / `output_tokens` (input includes cached input);
//! - `execute_tool {tool}` — one per tool call, a child of `invoke_agent` (calls run while the
//!   model still streams, so they are siblings of their `chat` span), with `gen_ai.tool.name`,
//!   `gen_ai.tool.call.id` and `gen_ai.tool.type`.
//!
//! Every span carries `gen_ai.conversation.id` (the session id) and our ids: `tenant`,
//! `session_id`, `run_id`. Failures set `error.type` (the stable error code) and the span
//! status. Prompts, outputs, tool arguments and results are recorded only when the operator
//! turns `telemetry.capture_content` on, each cut at [`CONTENT_LIMIT`] bytes.

use crate::ids::{RunId, SessionId, TenantId};
use tracing::Span;
use tracing::field::Empty;

/// The most bytes of one captured content attribute (prompt, output, arguments, result).
pub const CONTENT_LIMIT: usize = 16 * 1024;

/// The ids every span of a run carries.
#[derive(Clone, Debug)]
pub struct RunIds {
    pub tenant: TenantId,
    pub session: SessionId,
    pub run: RunId,
}

/// The span of one run on this replica.
pub fn invoke_agent(ids: &RunIds) -> Span {
    tracing::info_span!(
        "invoke_agent",
        otel.name = "invoke_agent",
        otel.kind = "internal",
        gen_ai.operation.name = "invoke_agent",
        gen_ai.agent.name = "norma",
        gen_ai.conversation.id = %ids.session,
        tenant = %ids.tenant,
        session_id = %ids.session,
        run_id = %ids.run,
        gen_ai.request.model = Empty,
        gen_ai.provider.name = Empty,
        error.type = Empty,
        otel.status_code = Empty,
    )
}

/// The span of one model call of the current run (`provider`: the provider kind).
pub fn chat(ids: &RunIds, provider: &str, model: &str) -> Span {
    tracing::info_span!(
        "chat",
        otel.name = %format_args!("chat {model}"),
        otel.kind = "client",
        gen_ai.operation.name = "chat",
        gen_ai.provider.name = provider,
        gen_ai.system = provider,
        gen_ai.request.model = model,
        gen_ai.response.model = Empty,
        gen_ai.response.finish_reasons = Empty,
        gen_ai.usage.input_tokens = Empty,
        gen_ai.usage.output_tokens = Empty,
        gen_ai.conversation.id = %ids.session,
        tenant = %ids.tenant,
        session_id = %ids.session,
        run_id = %ids.run,
        gen_ai.input.messages = Empty,
        gen_ai.output.messages = Empty,
        error.type = Empty,
        otel.status_code = Empty,
    )
}

/// The span of one tool call of the current run.
pub fn execute_tool(ids: &RunIds, tool: &str, call_id: &str) -> Span {
    tracing::info_span!(
        "execute_tool",
        otel.name = %format_args!("execute_tool {tool}"),
        otel.kind = "internal",
        gen_ai.operation.name = "execute_tool",
        gen_ai.tool.name = tool,
        gen_ai.tool.call.id = call_id,
        gen_ai.tool.type = "function",
        gen_ai.conversation.id = %ids.session,
        tenant = %ids.tenant,
        session_id = %ids.session,
        run_id = %ids.run,
        gen_ai.tool.call.arguments = Empty,
        gen_ai.tool.call.result = Empty,
        error.type = Empty,
        otel.status_code = Empty,
    )
}

/// Marks `span` failed with the stable `code`.
pub fn record_error(span: &Span, code: &str) {
    span.record("error.type", code);
    span.record("otel.status_code", "ERROR");
}

/// `value` as JSON, cut at [`CONTENT_LIMIT`] bytes (on a character boundary, marked `…`).
pub fn content(value: &impl serde::Serialize) -> String {
    let mut text = serde_json::to_string(value).unwrap_or_default();
    cut(&mut text);
    text
}

/// Cuts `text` at [`CONTENT_LIMIT`] bytes on a character boundary, marking the cut with `…`.
pub fn cut(text: &mut String) {
    if text.len() <= CONTENT_LIMIT {
        return;
    }
    let mut end = CONTENT_LIMIT;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text.truncate(end);
    text.push('…');
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn content_is_cut_on_a_character_boundary() {
        let long = "é".repeat(CONTENT_LIMIT);
        let text = content(&long);
        assert!(text.len() <= CONTENT_LIMIT + '…'.len_utf8());
        assert!(text.ends_with('…'));
        assert!(text.starts_with("\"é"));
        let short = content(&"hi");
        assert_eq!(short, "\"hi\"");
    }
}

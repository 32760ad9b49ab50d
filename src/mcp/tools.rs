//! A session MCP server's tools as registry tools `mcp__<server>__<tool>`, and their results
//! as tool output.
//!
//! Every tool closes safe (mutating, exclusive, approval-required) whatever it declares; a
//! server's `readOnlyHint` makes its tool read-only and concurrency-safe only when a tenant
//! admin marked the server `trusted` (and `destructiveHint` is not also set).

use super::config::{is_valid_tool_part, tool_name};
use super::server::{CallError, McpServer};
use crate::tools::builder::ToolBuilder;
use crate::tools::{DynTool, ToolError, ToolOutput, codes};
use rmcp::model::{CallToolResult, Tool as McpTool};
use serde_json::Value;
use std::sync::Arc;
use tracing::Instrument;

/// A description longer than this is cut.
const MAX_DESCRIPTION_CHARS: usize = 4096;
/// An input schema larger than this (as JSON) is not offered.
const MAX_SCHEMA_BYTES: usize = 64 * 1024;

/// The tools `server` offers (its allow-list applied) and those it lists but cannot offer,
/// each with the reason.
pub fn registry_tools(server: &Arc<McpServer>, listed: &[McpTool]) -> (Vec<DynTool>, Vec<String>) {
    let config = server.config();
    let mut offered = Vec::new();
    let mut skipped = Vec::new();
    for tool in listed {
        let own = tool.name.as_ref();
        if config
            .tools
            .as_ref()
            .is_some_and(|allowed| !allowed.iter().any(|name| name == own))
        {
            continue;
        }
        match registry_tool(server, tool) {
            Ok(built) => offered.push(built),
            Err(why) => skipped.push(format!("{own}: {why}")),
        }
    }
    if let Some(allowed) = &config.tools {
        for name in allowed {
            if !listed.iter().any(|tool| tool.name == name.as_str()) {
                skipped.push(format!("{name}: the server does not list it"));
            }
        }
    }
    (offered, skipped)
}

fn registry_tool(server: &Arc<McpServer>, tool: &McpTool) -> Result<DynTool, String> {
    let config = server.config();
    let own = tool.name.to_string();
    if !is_valid_tool_part(&config.name, &own) {
        return Err(format!(
            "`{}` is not a valid tool name (1 to 64 characters from [A-Za-z0-9_-])",
            tool_name(&config.name, &own)
        ));
    }
    let schema = Value::Object((*tool.input_schema).clone());
    if serde_json::to_vec(&schema).map_or(usize::MAX, |bytes| bytes.len()) > MAX_SCHEMA_BYTES {
        return Err(format!(
            "its input schema is larger than {MAX_SCHEMA_BYTES} bytes"
        ));
    }
    let mut description: String = tool
        .description
        .as_deref()
        .unwrap_or_default()
        .chars()
        .take(MAX_DESCRIPTION_CHARS)
        .collect();
    if description.is_empty() {
        description = format!("Tool `{own}` of the MCP server `{}`.", config.name);
    }
    let annotations = tool.annotations.as_ref();
    let read_only = config.trusted
        && annotations
            .is_some_and(|a| a.read_only_hint == Some(true) && a.destructive_hint != Some(true));
    let server = server.clone();
    ToolBuilder::new(tool_name(&config.name, &own))
        .description(description)
        .schema(schema)
        .read_only(read_only)
        .concurrency_safe(read_only)
        .handler(move |input: Value, ctx| {
            let server = server.clone();
            let own = own.clone();
            async move {
                let arguments = match input {
                    Value::Object(map) => map,
                    _ => serde_json::Map::new(),
                };
                let name = server.config().name.clone();
                let span = tracing::info_span!(
                    "mcp_call", server = %name, tool = %own,
                    tenant = %ctx.tenant, session_id = %ctx.session_id, tool_use_id = %ctx.tool_use_id
                );
                let outcome = server
                    .call(&own, arguments, &ctx.cancel)
                    .instrument(span)
                    .await;
                match outcome {
                    Ok(result) => output(result),
                    Err(CallError::Timeout(seconds)) => Err(ToolError::new(
                        codes::TOOL_TIMEOUT,
                        format!("the MCP server `{name}` did not answer within {seconds} s"),
                    )),
                    Err(CallError::Cancelled) => {
                        Err(ToolError::new(codes::CANCELLED, "the call was cancelled"))
                    }
                    Err(error) => Err(ToolError::failed(format!(
                        "MCP server `{name}`: {error}"
                    ))),
                }
            }
        })
        .build()
        .map(|built| Arc::new(built) as DynTool)
        .map_err(|error| error.to_string())
}

/// The model-visible output of a call: text blocks as they are, images and audio as a short
/// note, embedded resources with their text, resource links by URI, then the structured
/// content as JSON when no text block already carries it. `isError` → `TOOL_FAILED` with
/// the server's text.
pub fn output(result: CallToolResult) -> Result<ToolOutput, ToolError> {
    let value = serde_json::to_value(&result).unwrap_or(Value::Null);
    let mut parts: Vec<String> = Vec::new();
    for block in value["content"].as_array().into_iter().flatten() {
        let kind = block["type"].as_str().unwrap_or_default();
        let text = match kind {
            "text" => block["text"].as_str().unwrap_or_default().to_owned(),
            "image" | "audio" => format!(
                "[{kind}: {}, {} bytes of base64]",
                block["mimeType"].as_str().unwrap_or("unknown type"),
                block["data"].as_str().map_or(0, str::len)
            ),
            "resource" => {
                let resource = &block["resource"];
                let uri = resource["uri"].as_str().unwrap_or_default();
                match resource["text"].as_str() {
                    Some(text) => format!("[resource {uri}]\n{text}"),
                    None => format!(
                        "[resource {uri}: {}, {} bytes of base64]",
                        resource["mimeType"].as_str().unwrap_or("unknown type"),
                        resource["blob"].as_str().map_or(0, str::len)
                    ),
                }
            }
            "resource_link" => format!(
                "[resource link {}]",
                block["uri"].as_str().unwrap_or_default()
            ),
            other => format!("[{other} content]"),
        };
        parts.push(text);
    }
    if let Some(structured) = result.structured_content.as_ref() {
        let json = structured.to_string();
        let carried = parts
            .iter()
            .any(|part| serde_json::from_str::<Value>(part).is_ok_and(|v| &v == structured));
        if !carried {
            parts.push(format!("structured content: {json}"));
        }
    }
    let text = parts.join("\n");
    if result.is_error == Some(true) {
        let message = if text.is_empty() {
            "the MCP tool reported an error".to_owned()
        } else {
            text
        };
        return Err(ToolError::failed(message));
    }
    Ok(ToolOutput::text(text))
}

#[cfg(test)]
mod tests {
    use super::*;
    use rmcp::model::ContentBlock;
    use serde_json::json;

    #[test]
    fn content_blocks_become_text() {
        let mut result = CallToolResult::success(vec![
            ContentBlock::text("hello"),
            ContentBlock::image("aGVsbG8=", "image/png"),
            ContentBlock::embedded_text("file:///n.txt", "notes"),
        ]);
        result.structured_content = Some(json!({"a": 1}));
        let text = output(result).unwrap().text;
        assert_eq!(
            text,
            "hello\n[image: image/png, 8 bytes of base64]\n[resource file:///n.txt]\nnotes\nstructured content: {\"a\":1}"
        );
    }

    #[test]
    fn structured_content_already_in_text_is_not_repeated() {
        let mut result = CallToolResult::success(vec![ContentBlock::text("{\"a\": 1}")]);
        result.structured_content = Some(json!({"a": 1}));
        assert_eq!(output(result).unwrap().text, "{\"a\": 1}");
    }

    #[test]
    fn is_error_is_tool_failed_with_the_servers_text() {
        let result = CallToolResult::error(vec![ContentBlock::text("boom")]);
        let error = output(result).unwrap_err();
        assert_eq!(error.code, codes::TOOL_FAILED);
        assert_eq!(error.message, "boom");
    }
}

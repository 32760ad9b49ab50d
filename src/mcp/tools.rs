//! A session MCP server's tools as registry tools `mcp__<server>__<tool>`, and their results
//! as tool output.
//!
//! Every tool closes safe (mutating, exclusive, approval-required) whatever it declares; a
//! server's `readOnlyHint` makes its tool read-only and concurrency-safe only when a tenant
//! admin marked the server `trusted` (and `destructiveHint` is not also set).

use super::config::{is_valid_tool_part, tool_name};
use super::listing::{Listing, ToolSchema};
use super::server::{CallError, CallSpec, McpServer};
use crate::message::ToolImage;
use crate::tools::builder::ToolBuilder;
use crate::tools::schema::CompiledSchema;
use crate::tools::{DynTool, ToolError, ToolOutput, codes};
use base64::Engine;
use rmcp::model::{CallToolResult, Tool as McpTool};
use serde_json::Value;
use std::sync::Arc;
use tracing::Instrument;

/// A description longer than this is cut.
const MAX_DESCRIPTION_CHARS: usize = 4096;
/// An input schema larger than this (as JSON) is not offered.
const MAX_SCHEMA_BYTES: usize = 64 * 1024;
/// Images of one result passed to the model as images (more stay text notes)…
const MAX_IMAGES: usize = 4;
/// …each of at most this much base64.
const MAX_IMAGE_BASE64_BYTES: usize = 1024 * 1024;
/// The image types providers take.
const IMAGE_TYPES: [&str; 4] = ["image/png", "image/jpeg", "image/gif", "image/webp"];

/// The tools `server` offers (its allow-list applied) and those it lists but cannot offer,
/// each with the reason.
pub fn registry_tools(server: &Arc<McpServer>, listing: &Listing) -> (Vec<DynTool>, Vec<String>) {
    let config = server.config();
    let mut offered = Vec::new();
    let mut skipped: Vec<String> = listing.dropped_notes().collect();
    let listed = &listing.tools;
    for (tool, schema) in listed.iter().zip(listing.schemas()) {
        let own = tool.name.as_ref();
        if config
            .tools
            .as_ref()
            .is_some_and(|allowed| !allowed.iter().any(|name| name == own))
        {
            continue;
        }
        match registry_tool(server, tool, schema) {
            Ok(built) => offered.push(built),
            Err(why) => skipped.push(format!("{own}: {why}")),
        }
    }
    if let Some(allowed) = &config.tools {
        for name in allowed {
            if !listed.iter().any(|tool| tool.name == name.as_str())
                && !listing.dropped_by_name(name)
            {
                skipped.push(format!("{name}: the server does not list it"));
            }
        }
    }
    (offered, skipped)
}

/// A listed tool's input schema, shared and compiled, or why it cannot be offered: larger
/// than [`MAX_SCHEMA_BYTES`] or not a valid object schema (made once per listing, see
/// [`Listing::schemas`]).
pub(super) fn tool_schema(tool: &McpTool) -> ToolSchema {
    let schema = Value::Object((*tool.input_schema).clone());
    if crate::json_text::json_len(&schema) > MAX_SCHEMA_BYTES {
        return Err(format!(
            "its input schema is larger than {MAX_SCHEMA_BYTES} bytes"
        ));
    }
    let compiled = CompiledSchema::compile(&schema).map_err(|error| error.to_string())?;
    Ok((Arc::new(schema), compiled))
}

fn registry_tool(
    server: &Arc<McpServer>,
    tool: &McpTool,
    schema: &ToolSchema,
) -> Result<DynTool, String> {
    let config = server.config();
    let own = tool.name.to_string();
    if !is_valid_tool_part(&config.name, &own) {
        return Err(format!(
            "`{}` is not a valid tool name (1 to 64 characters from [A-Za-z0-9_-])",
            tool_name(&config.name, &own)
        ));
    }
    let (schema, compiled) = schema.clone()?;
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
    let registry_name = tool_name(&config.name, &own);
    ToolBuilder::new(registry_name.clone())
        .description(description)
        .compiled_schema(schema, compiled)
        .read_only(read_only)
        .concurrency_safe(read_only)
        .handler(move |input: Value, ctx| {
            let server = server.clone();
            let own = own.clone();
            let registry_name = registry_name.clone();
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
                let call = CallSpec {
                    tool: &own,
                    tool_use_id: &ctx.tool_use_id,
                    tool_name: &registry_name,
                    progress: ctx.progress.clone(),
                };
                let outcome = server
                    .call(call, arguments, &ctx.cancel)
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

/// An image block the model can receive as an image: a type providers take, bounded, valid
/// base64.
fn model_image(block: &Value) -> Option<ToolImage> {
    let media_type = block["mimeType"].as_str()?;
    let data = block["data"].as_str()?;
    (IMAGE_TYPES.contains(&media_type)
        && data.len() <= MAX_IMAGE_BASE64_BYTES
        && base64::engine::general_purpose::STANDARD
            .decode(data)
            .is_ok())
    .then(|| ToolImage {
        media_type: media_type.to_owned(),
        data: data.to_owned(),
    })
}

/// The model-visible output of a call: text blocks as they are; images as image blocks
/// beside the text (at most 4 of at most 1 MiB of base64 each, PNG, JPEG, GIF or WebP, each
/// with a note in the text) and other images and audio as a short note; embedded resources
/// with their text; resource links by URI; then the structured content as JSON when no text
/// block already carries it. `isError` → `TOOL_FAILED` with the server's text.
pub fn output(result: CallToolResult) -> Result<ToolOutput, ToolError> {
    let value = serde_json::to_value(&result).unwrap_or(Value::Null);
    let mut parts: Vec<String> = Vec::new();
    let mut images: Vec<ToolImage> = Vec::new();
    for block in value["content"].as_array().into_iter().flatten() {
        let kind = block["type"].as_str().unwrap_or_default();
        let image = (kind == "image" && images.len() < MAX_IMAGES)
            .then(|| model_image(block))
            .flatten();
        let text = match kind {
            "text" => block["text"].as_str().unwrap_or_default().to_owned(),
            "image" if image.is_some() => {
                let image = image.expect("checked");
                let note = format!("[image {}: {}]", images.len() + 1, image.media_type);
                images.push(image);
                note
            }
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
    Ok(ToolOutput {
        images,
        ..ToolOutput::text(text)
    })
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
        let out = output(result).unwrap();
        assert_eq!(
            out.text,
            "hello\n[image 1: image/png]\n[resource file:///n.txt]\nnotes\nstructured content: {\"a\":1}"
        );
        assert_eq!(
            out.images,
            [ToolImage {
                media_type: "image/png".into(),
                data: "aGVsbG8=".into()
            }]
        );
    }

    #[test]
    fn images_the_model_cannot_take_stay_notes() {
        let big = "A".repeat(MAX_IMAGE_BASE64_BYTES + 4);
        let mut blocks = vec![
            ContentBlock::image("not base64!", "image/png"),
            ContentBlock::image("aGVsbG8=", "image/tiff"),
            ContentBlock::image(big.as_str(), "image/png"),
        ];
        blocks.extend((0..5).map(|_| ContentBlock::image("aGVsbG8=", "image/gif")));
        let out = output(CallToolResult::success(blocks)).unwrap();
        assert_eq!(out.images.len(), MAX_IMAGES);
        let lines: Vec<&str> = out.text.lines().collect();
        assert_eq!(lines[0], "[image: image/png, 11 bytes of base64]");
        assert_eq!(lines[1], "[image: image/tiff, 8 bytes of base64]");
        assert!(lines[2].starts_with("[image: image/png, 1048580 bytes"));
        assert_eq!(lines[3], "[image 1: image/gif]");
        assert_eq!(lines[7], "[image: image/gif, 8 bytes of base64]");
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

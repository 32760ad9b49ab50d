//! AskUserQuestion: questions for the user, asked over the durable approval channel.
//!
//! The tool is approval-required, so the pipeline turns a call into a persisted approval
//! request (the questions are its input). Whoever answers allows it with an `updated_input`
//! that adds `answers` (one per question); the pipeline validates that input against this
//! schema and permission-checks it again, then the tool returns the answers to the model. A
//! deny means the user declined; an unanswered request expires like any approval.

use crate::permission::SelfDecision;
use crate::tools::builder::ToolBuilder;
use crate::tools::schema::static_schema;
use crate::tools::{DynTool, ToolError, ToolOutput};
use serde_json::Value;
use std::sync::Arc;

/// The AskUserQuestion tool.
pub fn ask_user_tool() -> DynTool {
    let tool = ToolBuilder::new("AskUserQuestion")
        .description(
            "Ask the user one or more questions and wait for the answers. Use it when you \
             cannot proceed without a decision or information only the user has.",
        )
        .static_schema(static_schema!({
            "type": "object",
            "properties": {
                "questions": {
                    "type": "array", "minItems": 1, "maxItems": 4,
                    "items": {
                        "type": "object",
                        "properties": {
                            "question": {"type": "string", "minLength": 1, "maxLength": 2000},
                            "options": {"type": "array", "items": {"type": "string", "maxLength": 200}, "maxItems": 10}
                        },
                        "required": ["question"],
                        "additionalProperties": false
                    }
                },
                "answers": {
                    "description": "Filled in by the user's answer, one per question; the model leaves it out.",
                    "type": "array", "items": {"type": "string", "maxLength": 10000}
                }
            },
            "required": ["questions"],
            "additionalProperties": false
        }))
        // Not read-only: a read-only tool would be allowed without asking anyone.
        .self_decision(SelfDecision::Ask)
        .handler(|input: Value, _ctx| async move { answer(&input) })
        .build()
        .expect("the AskUserQuestion schema is valid");
    Arc::new(tool)
}

fn answer(input: &Value) -> Result<ToolOutput, ToolError> {
    let questions = input["questions"].as_array().map(Vec::len).unwrap_or(0);
    let answers: Vec<&str> = input["answers"]
        .as_array()
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    if answers.len() != questions {
        return Err(ToolError::new(
            "ANSWERS_MISSING",
            format!(
                "expected {questions} answer(s) from the user, got {}; the user answers through the approval request",
                answers.len()
            ),
        ));
    }
    let text = input["questions"]
        .as_array()
        .into_iter()
        .flatten()
        .zip(&answers)
        .map(|(q, a)| format!("Q: {}\nA: {a}", q["question"].as_str().unwrap_or_default()))
        .collect::<Vec<_>>()
        .join("\n\n");
    Ok(ToolOutput::text(text))
}

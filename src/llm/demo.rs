//! The built-in demo agent: what the offline (scripted) provider plays in development mode
//! when neither the server nor the session gives it a script, so a newcomer sees tools, an
//! approval and streaming without any model key.
//!
//! Every prompt plays the same three turns (`per_prompt`): list the workspace with `LS`, write
//! `demo-notes.md` with `Write` (which asks for approval in the default permission mode), then
//! stream a closing answer. A denied write is answered with its own closing turn.

use serde_json::{Value, json};

/// The file the demo agent writes.
pub const DEMO_FILE: &str = "demo-notes.md";

/// The demo script (see [`crate::llm::scripted`] for the format).
pub fn demo_script() -> Value {
    json!({
        "per_prompt": true,
        "turns": [
            {
                "text": "Hello! I am Norma's built-in demo agent: no model key needed. \
                         Let me look at the workspace first.",
                "tool_calls": [{"name": "LS", "input": {"path": ""}}]
            },
            {
                "when_last_tool_result_contains": "permission denied",
                "text": "Understood: I did not write the file. The tool answered:\n\n\
                         > {{last_tool_result}}\n\nSend another prompt to try again.",
                "stop": "end_turn"
            },
            {
                "text": "The workspace holds:\n\n{{last_tool_result}}\n\nNow I will save your \
                         prompt in `demo-notes.md`. Writing a file asks for your approval in the \
                         default permission mode: approve or deny it.",
                "tool_calls": [{"name": "Write", "input": {
                    "file_path": DEMO_FILE,
                    "content": "# Notes from the demo agent\n\nYou asked: {{last_user_text}}\n"
                }}]
            },
            {
                "text": "Done: the tool answered \"{{last_tool_result}}\".\n\nThis answer \
                         streams in small pieces, as a real model's would. With a provider \
                         configured (`provider.kind = \"anthropic\"` or `\"openai\"`), the same \
                         session runs a real model with the same tools, permissions, approvals \
                         and events. You said: {{last_user_text}}",
                "stop": "end_turn"
            }
        ]
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::llm::scripted::ScriptedProvider;

    #[test]
    fn the_demo_script_is_a_valid_script() {
        ScriptedProvider::new(Some(&demo_script())).expect("valid demo script");
    }
}

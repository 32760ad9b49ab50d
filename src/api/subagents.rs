//! Creation-time checks of a session's subagent settings that need the server's settings
//! (the pure ones are in [`crate::subagents::validate`]).

use crate::app::AppState;
use crate::error::{ApiError, ApiResult};
use crate::session_config::SessionConfig;
use crate::subagents::reasons;
use serde_json::{Value, json};

/// Refuses a client-sent `subagent` link, and agent scripts where scripts are not allowed.
pub fn check_creation(state: &AppState, config: &SessionConfig) -> ApiResult<()> {
    if config.subagent.is_some() {
        return Err(ApiError::invalid(
            "invalid session config: subagent: set by the server on a subagent's own session",
        )
        .with_details(json!({ "field": "subagent", "reason": reasons::LINK_RESERVED })));
    }
    if let Some((name, _)) = config
        .agents
        .iter()
        .find(|(_, agent)| agent.model.script.is_some())
    {
        ensure_scripts(state, &format!("agents.{name}.model.script"))?;
    }
    Ok(())
}

/// A fork copies the configuration: its agent scripts must still be allowed.
pub fn check_fork(state: &AppState, config: &Value) -> ApiResult<()> {
    if let Some((name, _)) = config["agents"].as_object().and_then(|agents| {
        agents
            .iter()
            .find(|(_, agent)| !agent["model"]["script"].is_null())
    }) {
        ensure_scripts(state, &format!("agents.{name}.model.script"))?;
    }
    Ok(())
}

fn ensure_scripts(state: &AppState, field: &str) -> ApiResult<()> {
    if state.settings.session_scripts_allowed() {
        return Ok(());
    }
    Err(ApiError::invalid(format!(
        "invalid session config: {field}: scripted model turns are a development and test \
         feature and this server does not allow them"
    ))
    .with_details(json!({ "field": field })))
}

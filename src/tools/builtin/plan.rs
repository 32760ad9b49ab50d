//! EnterPlanMode / ExitPlanMode: switch the session's permission mode durably. The override
//! lives in the store and wins over the mode in the session configuration; EnterPlanMode
//! remembers the mode it replaced, ExitPlanMode (approval-required, so the plan goes through
//! the approval callback) restores it.

use super::{parse_input, store_error};
use crate::ids::{SessionId, TenantId};
use crate::permission::{PermissionMode, SelfDecision};
use crate::session_config::SessionConfig;
use crate::store::{ModeOverride, Store, StoreError, mode_str};
use crate::tools::schema::{StaticSchema, static_schema};
use crate::tools::{Tool, ToolContext, ToolError, ToolOutput};
use async_trait::async_trait;
use serde::Deserialize;
use serde_json::Value;
use std::sync::Arc;

/// Error codes of the plan-mode tools.
pub mod codes {
    /// ExitPlanMode while the session is not in plan mode.
    pub const NOT_IN_PLAN_MODE: &str = "NOT_IN_PLAN_MODE";
    /// The plan text is empty or too long.
    pub const PLAN_INVALID: &str = "PLAN_INVALID";
    /// The session no longer exists for this tenant.
    pub const SESSION_NOT_FOUND: &str = "SESSION_NOT_FOUND";
}

/// Longest plan accepted by ExitPlanMode, in bytes.
pub const MAX_PLAN_BYTES: usize = 64 * 1024;

/// The mode configured when the session was created (from its stored configuration).
pub async fn configured_mode(
    store: &dyn Store,
    tenant: &TenantId,
    session: &SessionId,
) -> Result<PermissionMode, ToolError> {
    let record = store
        .get_session(tenant, session)
        .await
        .map_err(store_error)?
        .ok_or_else(|| ToolError::new(codes::SESSION_NOT_FOUND, "the session does not exist"))?;
    let config = SessionConfig::from_json(record.config)
        .map_err(|e| ToolError::failed(format!("stored session configuration is invalid: {e}")))?;
    Ok(config.permission.mode)
}

/// The mode in force for a session: the durable override if any, else `configured`. The loop
/// calls this before each permission decision.
pub async fn effective_mode(
    store: &dyn Store,
    tenant: &TenantId,
    session: &SessionId,
    configured: PermissionMode,
) -> Result<PermissionMode, StoreError> {
    Ok(store
        .get_mode_override(tenant, session)
        .await?
        .map_or(configured, |state| state.mode))
}

/// The EnterPlanMode tool of one session.
pub struct EnterPlanModeTool {
    store: Arc<dyn Store>,
    tenant: TenantId,
    session: SessionId,
    schema: &'static StaticSchema,
}

impl EnterPlanModeTool {
    /// The tool for `session` of `tenant`.
    pub fn new(store: Arc<dyn Store>, tenant: TenantId, session: SessionId) -> Self {
        Self {
            store,
            tenant,
            session,
            schema: static_schema!({"type": "object", "properties": {}, "additionalProperties": false}),
        }
    }
}

impl EnterPlanModeTool {
    async fn current_mode(&self) -> Result<PermissionMode, ToolError> {
        let store = self.store.as_ref();
        match store
            .get_mode_override(&self.tenant, &self.session)
            .await
            .map_err(store_error)?
        {
            Some(state) => Ok(state.mode),
            None => configured_mode(store, &self.tenant, &self.session).await,
        }
    }
}

#[async_trait]
impl Tool for EnterPlanModeTool {
    fn name(&self) -> &str {
        "EnterPlanMode"
    }
    fn description(&self) -> &str {
        "Switches the session to plan mode: research and plan without changing anything, then \
         present the plan with ExitPlanMode."
    }
    fn input_schema(&self) -> &Value {
        self.schema.value()
    }
    fn static_schema(&self) -> Option<&'static StaticSchema> {
        Some(self.schema)
    }
    // Entering plan mode only narrows what the session may do.
    fn self_decision(&self, _input: &Value) -> SelfDecision {
        SelfDecision::Allow
    }
    async fn call(&self, _input: Value, _ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        let store = self.store.as_ref();
        let previous = self.current_mode().await?;
        if previous == PermissionMode::Plan {
            return Ok(ToolOutput::text("Already in plan mode."));
        }
        store
            .set_mode_override(
                &self.tenant,
                &self.session,
                ModeOverride {
                    mode: PermissionMode::Plan,
                    previous: Some(previous),
                },
            )
            .await
            .map_err(store_error)?;
        Ok(ToolOutput::text(format!(
            "Entered plan mode (was {}). Explore and plan only; call ExitPlanMode with the plan \
             to ask for approval.",
            mode_str(previous)
        )))
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ExitInput {
    plan: String,
}

/// The ExitPlanMode tool of one session.
pub struct ExitPlanModeTool {
    store: Arc<dyn Store>,
    tenant: TenantId,
    session: SessionId,
    schema: &'static StaticSchema,
}

impl ExitPlanModeTool {
    /// The tool for `session` of `tenant`.
    pub fn new(store: Arc<dyn Store>, tenant: TenantId, session: SessionId) -> Self {
        Self {
            store,
            tenant,
            session,
            schema: static_schema!({
                "type": "object",
                "properties": {
                    "plan": {"type": "string", "minLength": 1, "description": "The plan to approve (Markdown)"}
                },
                "required": ["plan"],
                "additionalProperties": false
            }),
        }
    }
}

#[async_trait]
impl Tool for ExitPlanModeTool {
    fn name(&self) -> &str {
        "ExitPlanMode"
    }
    fn description(&self) -> &str {
        "Presents the plan for approval and, once approved, leaves plan mode and restores the \
         previous permission mode."
    }
    fn input_schema(&self) -> &Value {
        self.schema.value()
    }
    fn static_schema(&self) -> Option<&'static StaticSchema> {
        Some(self.schema)
    }
    // The plan goes through the approval callback.
    fn self_decision(&self, _input: &Value) -> SelfDecision {
        SelfDecision::Ask
    }
    async fn call(&self, input: Value, _ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        let input: ExitInput = parse_input(input)?;
        if input.plan.trim().is_empty() || input.plan.len() > MAX_PLAN_BYTES {
            return Err(ToolError::new(
                codes::PLAN_INVALID,
                format!("the plan must be 1 to {MAX_PLAN_BYTES} bytes"),
            ));
        }
        let store = self.store.as_ref();
        let current = store
            .get_mode_override(&self.tenant, &self.session)
            .await
            .map_err(store_error)?;
        let in_plan = match current {
            Some(state) => state.mode == PermissionMode::Plan,
            None => {
                configured_mode(store, &self.tenant, &self.session).await? == PermissionMode::Plan
            }
        };
        if !in_plan {
            return Err(ToolError::new(
                codes::NOT_IN_PLAN_MODE,
                "the session is not in plan mode",
            ));
        }
        // A session configured in plan mode has no earlier mode: it continues in `default`.
        let restored = current
            .and_then(|state| state.previous)
            .filter(|mode| *mode != PermissionMode::Plan)
            .unwrap_or(PermissionMode::Default);
        store
            .set_mode_override(
                &self.tenant,
                &self.session,
                ModeOverride {
                    mode: restored,
                    previous: None,
                },
            )
            .await
            .map_err(store_error)?;
        Ok(ToolOutput::text(format!(
            "The plan was approved. Left plan mode; permission mode is {} again. Carry out the \
             plan.",
            mode_str(restored)
        )))
    }
}

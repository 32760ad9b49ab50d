//! The run's answer to its MCP servers' sampling requests (see `crate::mcp::sampling`): the
//! run's provider and model, with only what the server sent, after the tenant's spend
//! budgets are checked; the call is recorded as an `mcp_sampling` event, whose usage the
//! writer turns into a usage ledger row (so it counts in `/v1/usage` and the budgets).

use super::budget_gate::{BudgetGate, BudgetRefusal};
use super::session_writer::SessionWriter;
use crate::ids::TenantId;
use crate::llm::{self, ModelRequest, Provider};
use crate::mcp::sampling::{Sampler, SamplingAnswer, SamplingRequest};
use crate::message::{ContentBlock, ViewMessage};
use crate::run_event::{self, RunEvent};
use async_trait::async_trait;
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

pub(super) struct RunSampler {
    pub provider: Arc<dyn Provider>,
    pub model: String,
    pub writer: Arc<SessionWriter>,
    pub budgets: BudgetGate,
    pub tenant: TenantId,
    /// The run's cancellation: a cancelled run stops its sampling calls too.
    pub cancel: CancellationToken,
}

#[async_trait]
impl Sampler for RunSampler {
    async fn sample(&self, request: SamplingRequest) -> Result<SamplingAnswer, String> {
        match self
            .budgets
            .check(&self.tenant, || None, Default::default())
            .await
        {
            Ok(()) | Err(BudgetRefusal::NotPriced { .. }) => {}
            Err(BudgetRefusal::Exceeded(exceeded)) => {
                return Err(format!("the tenant's budget is spent: {exceeded}"));
            }
            Err(BudgetRefusal::Store(error)) => {
                return Err(format!("the tenant's budget cannot be checked: {error}"));
            }
        }
        let model_request = ModelRequest {
            model: self.model.clone(),
            system: request.system,
            messages: request
                .messages
                .into_iter()
                .map(ViewMessage::from)
                .collect(),
            tools: Default::default(),
            max_tokens: request.max_tokens,
            temperature: request.temperature,
        };
        let stream = self
            .provider
            .stream(&model_request, &self.cancel)
            .await
            .map_err(|error| format!("the model call failed: {error}"))?;
        let turn = llm::collect(stream, |_| {})
            .await
            .map_err(|error| format!("the model call failed: {error}"))?;
        let text: Vec<&str> = turn
            .message
            .content
            .iter()
            .filter_map(|block| match block {
                ContentBlock::Text { text } => Some(text.as_str()),
                _ => None,
            })
            .collect();
        let event = RunEvent::McpSampling(run_event::McpSampling {
            server: request.server,
            tool_use_id: request.tool_use_id,
            model: self.model.clone(),
            stop_reason: turn.stop_reason.clone(),
            usage: turn.usage,
        });
        // Recorded before the server gets the answer: a call not counted is not answered.
        self.writer
            .write(vec![], vec![event])
            .await
            .map_err(|error| format!("the sampling call could not be recorded: {}", error.0))?;
        Ok(SamplingAnswer {
            text: text.join("\n"),
            model: self.model.clone(),
            stop_reason: turn.stop_reason,
        })
    }
}

//! The provider a run calls and the meter of its usage: the tenant's (or the server's)
//! provider settings with the session's model overrides, wrapped for telemetry.

use super::*;

impl SessionRuntime {
    /// The tenant's provider settings (or the server's), with the session's model overrides.
    pub(super) fn provider_config(&self, tenant: &TenantId) -> &ProviderConfig {
        self.settings
            .tenant_providers
            .get(tenant.as_str())
            .unwrap_or(&self.settings.provider)
    }

    /// The provider settings a session's runs use: the tenant's (or the server's) with the
    /// session's model name and script applied.
    fn effective_provider(
        &self,
        tenant: &TenantId,
        config: &SessionConfig,
    ) -> Result<ProviderConfig, RuntimeError> {
        let mut provider = self.provider_config(tenant).clone();
        if let Some(script) = &config.model.script {
            // Checked here, when the run starts, not only at creation: the session may have
            // been stored by a server that allowed scripts.
            if !self.settings.allow_session_scripts {
                return Err(RuntimeError::ScriptsNotAllowed);
            }
            provider = ProviderConfig {
                kind: llm::ProviderKind::Scripted,
                script: Some(script.clone()),
                ..provider
            };
        }
        if let Some(name) = &config.model.name {
            provider.model = name.clone();
        }
        Ok(provider)
    }

    /// The usage meter of a session's runs: provider kind, model and its price.
    pub(super) fn usage_meter(
        &self,
        tenant: &TenantId,
        config: &SessionConfig,
    ) -> Result<crate::usage::UsageMeter, RuntimeError> {
        let provider = self.effective_provider(tenant, config)?;
        Ok(crate::usage::UsageMeter::new(
            provider.kind.as_str(),
            &provider.model,
            &self.settings.prices,
        ))
    }

    /// The run's provider, wrapped for telemetry: each call is a `chat` span and counts in
    /// the model-call metrics (its model folded to `other` unless configured).
    pub(super) fn provider_for(
        &self,
        ids: &crate::telemetry::genai::RunIds,
        config: &SessionConfig,
    ) -> Result<Arc<dyn Provider>, RuntimeError> {
        let provider = self.effective_provider(&ids.tenant, config)?;
        if let Some(url) = &provider.base_url {
            self.egress
                .check_endpoint(url)
                .map_err(|error| RuntimeError::Setup(format!("provider base_url: {error}")))?;
        }
        let inner = llm::build_provider(&provider, self.http.clone())
            .map_err(|error| RuntimeError::Setup(error.to_string()))?;
        let kind = provider.kind.as_str();
        let run_span = tracing::Span::current();
        run_span.record("gen_ai.provider.name", kind);
        run_span.record("gen_ai.request.model", provider.model.as_str());
        Ok(Arc::new(llm::instrumented::Instrumented {
            inner,
            kind,
            instruments: self
                .settings
                .metrics
                .model_instruments(kind, &provider.model),
            model: provider.model,
            ids: ids.clone(),
            capture_content: self.settings.capture_content,
        }))
    }
}

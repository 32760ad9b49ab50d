//! A run's tools: the registry assembled from the session's configuration — built-in tools
//! (those `tools` enables; `deferred_tools` behind the two deferred-tool wrappers), MCP
//! tools, Noa's, the skill tool and the `Agent` tool — each built for the run going on.

use super::*;

/// A run's tools (see [`SessionRuntime::run_tools`]).
pub(super) struct RunTools {
    pub registry: ToolRegistry,
    pub noa: Option<Arc<crate::noa::NoaSession>>,
    pub unlocked: crate::tools::deferred::UnlockSet,
    pub delegated: subagent::DelegatedUsage,
}

impl SessionRuntime {
    /// The run's tool registry and what the run keeps of it: its Noa session (when the session
    /// opts in), its set of unlocked deferred tools and its delegated-usage counter.
    #[allow(clippy::too_many_arguments)]
    pub(super) async fn run_tools(
        &self,
        (tenant, session, run_id): (&TenantId, &SessionId, &RunId),
        config: &SessionConfig,
        env: &SessionEnv,
        writer: &Arc<SessionWriter>,
        gate: &Arc<approvals::LiveGate>,
        mode: &Arc<std::sync::RwLock<crate::permission::PermissionMode>>,
        resuming: bool,
    ) -> Result<RunTools, RuntimeError> {
        let web_fetch = self.web_fetch_tool(tenant, session, config, env, writer, gate.clone())?;
        env.egress_journal
            .set_ladder(Arc::new(builtin::web_fetch::FetchLadder {
                gate: gate.clone(),
                tool: web_fetch.clone(),
            }));
        let mut registry = ToolRegistry::new();
        let enabled: Option<HashSet<&str>> = config
            .tools
            .as_ref()
            .map(|t| t.iter().map(String::as_str).collect());
        for tool in builtin::file_tools()
            .into_iter()
            .chain(builtin::shell_tools(&env.shells))
            .chain([builtin::ask_user::ask_user_tool()])
            .chain(builtin::state_tools(
                self.store.clone(),
                tenant.clone(),
                session.clone(),
            ))
            .chain([web_fetch.clone()])
            .chain(self.web_search_tool(tenant, config, writer)?)
        {
            if enabled
                .as_ref()
                .is_none_or(|names| names.contains(tool.name()))
            {
                let registered = if config.deferred_tools.iter().any(|d| d == tool.name()) {
                    registry.register_deferred(tool)
                } else {
                    registry.register(tool)
                };
                registered.map_err(|error| RuntimeError::Setup(error.to_string()))?;
            }
        }
        // The session's MCP servers start here (lazily, with its first run); one that does
        // not start only shows in its status.
        crate::mcp::refresh::register_tools(&mut registry, env.mcp.tools().await);
        // Noa (only for sessions that opt in: no store read otherwise).
        let noa = match config
            .context
            .noa()
            .map_err(|v| RuntimeError::Setup(v.message))?
        {
            Some(settings) => {
                let read_only: crate::noa::ToolNames = registry.read_only_names();
                let backend = Arc::new(crate::noa::session::StoreBackend {
                    store: self.store.clone(),
                    tenant: tenant.clone(),
                    session: session.clone(),
                });
                let keep = crate::noa::session::Keep {
                    views: self.noa_views.clone(),
                    session: session.clone(),
                };
                let noa =
                    crate::noa::NoaSession::load_kept(settings, read_only, backend, Some(keep))
                        .await?;
                for tool in crate::noa::tools::noa_tools(noa.clone()) {
                    registry
                        .register(tool)
                        .map_err(|error| RuntimeError::Setup(error.to_string()))?;
                }
                Some(noa)
            }
            None => None,
        };
        let unlocked = crate::tools::deferred::UnlockSet::default();
        let wrappers = crate::tools::deferred::wrappers(&registry, &unlocked);
        if !wrappers.is_empty() {
            // Only a session with deferred tools can have unlocked any: no read otherwise.
            // Read before the wrappers serve a call (they share `unlocked`).
            for name in self.store.unlocked_tools(tenant, session).await? {
                unlocked.unlock(&name);
            }
        }
        for tool in wrappers {
            registry
                .register(tool)
                .map_err(|error| RuntimeError::Setup(error.to_string()))?;
        }
        // Skills (only for sessions that offer them: no read otherwise).
        if let Some(tool) = self
            .skill_tool(
                tenant,
                session,
                config,
                &registry,
                &gate.rules,
                unlocked.clone(),
                &env.workspace,
                Arc::new(RunJournal {
                    writer: writer.clone(),
                }),
            )
            .await?
        {
            registry
                .register(tool)
                .map_err(|error| RuntimeError::Setup(error.to_string()))?;
        }
        let delegated = self
            .register_agent_tool(
                &mut registry,
                (tenant, session, run_id),
                config,
                (writer, mode, &unlocked),
                resuming,
            )
            .await?;
        Ok(RunTools {
            registry,
            noa,
            unlocked,
            delegated,
        })
    }

    /// The session's WebFetch, recording its requests in the run's transcript; redirect hops
    /// to unlisted hosts are judged by the session's permission gate (`gate`).
    fn web_fetch_tool(
        &self,
        tenant: &TenantId,
        session: &SessionId,
        config: &SessionConfig,
        env: &SessionEnv,
        writer: &Arc<SessionWriter>,
        gate: Arc<approvals::LiveGate>,
    ) -> Result<crate::tools::DynTool, RuntimeError> {
        let lists = crate::egress::DomainLists::parse(&config.egress.allow, &config.egress.deny)
            .map_err(RuntimeError::Setup)?;
        Ok(Arc::new(builtin::web_fetch::WebFetchTool::new(
            builtin::web_fetch::WebFetchSetup {
                broker: self.broker.clone(),
                limits: self.settings.fetch_limits,
                tenant: tenant.clone(),
                session: session.clone(),
                lists,
                fetch_any_url: config.egress.fetch_any_url,
                store: self.store.clone(),
                cache: env.web_cache.clone(),
                hops: Some(gate as Arc<dyn crate::tools::pipeline::PermissionGate>),
                recorder: Arc::new(RunJournal {
                    writer: writer.clone(),
                }),
                sandbox: self.sandbox.clone(),
            },
        )))
    }

    /// The session's WebSearch, when a search backend is configured for the tenant (else the
    /// tool is absent; [`SessionRuntime::absent_tools`] says why).
    fn web_search_tool(
        &self,
        tenant: &TenantId,
        config: &SessionConfig,
        writer: &Arc<SessionWriter>,
    ) -> Result<Option<crate::tools::DynTool>, RuntimeError> {
        let search = &self.settings.search;
        let Ok(backend) = search.for_tenant(tenant.as_str()) else {
            return Ok(None);
        };
        let lists = crate::egress::DomainLists::parse(&config.egress.allow, &config.egress.deny)
            .map_err(RuntimeError::Setup)?;
        Ok(Some(Arc::new(builtin::web_search::WebSearchTool::new(
            builtin::web_search::WebSearchSetup {
                backend,
                broker: self.broker.clone(),
                tenant: tenant.clone(),
                lists,
                timeout: search.timeout,
                max_response_bytes: search.max_response_bytes,
                recorder: Arc::new(RunJournal {
                    writer: writer.clone(),
                }),
            },
        ))))
    }

    /// Registers the `Agent` tool when the session defines agent types and its depth allows
    /// one more level; answers the run's delegated-usage counter (restored on resume).
    async fn register_agent_tool(
        &self,
        registry: &mut ToolRegistry,
        (tenant, session, run_id): (&TenantId, &SessionId, &RunId),
        config: &SessionConfig,
        (writer, mode, unlocked): (
            &Arc<SessionWriter>,
            &Arc<std::sync::RwLock<crate::permission::PermissionMode>>,
            &crate::tools::deferred::UnlockSet,
        ),
        resuming: bool,
    ) -> Result<subagent::DelegatedUsage, RuntimeError> {
        if !crate::subagents::offers_agent_tool(config) {
            return Ok(subagent::DelegatedUsage::default());
        }
        let delegated = subagent::DelegatedUsage::offered();
        if resuming {
            subagent::restore_delegated(self.store.as_ref(), tenant, session, run_id, &delegated)
                .await?;
        }
        let read_only = registry.read_only_names();
        let tool = subagent::AgentTool::new(subagent::AgentSetup {
            runtime: self.me.clone(),
            tenant: tenant.clone(),
            session: session.clone(),
            run_id: run_id.clone(),
            config: config.clone(),
            mode: mode.clone(),
            unlocked: unlocked.clone(),
            read_only,
            writer: writer.clone(),
            delegated: delegated.clone(),
        });
        registry
            .register(Arc::new(tool))
            .map_err(|error| RuntimeError::Setup(error.to_string()))?;
        Ok(delegated)
    }
}

//! Building and driving one run: the session's live environment (workspace, tasks, shells,
//! task notifications), the tool registry (built-in tools, deferred tools and their wrappers),
//! the permission gate, the approver, the pipeline, the provider, and the engine that runs the
//! claimed run — or continues it after a crash, a hand-off or parking — to its end.

use super::*;

/// How a claimed run begins.
pub(super) struct RunStart {
    /// The prompt of the run.
    pub prompt: String,
    /// The run was started before (a crash, a hand-off or parking): it is continued.
    pub resume: bool,
    /// When this replica took it up (its duration is counted from here).
    pub started: std::time::Instant,
    /// What the caller has just read for the run (a new prompt); the run reads it from the
    /// store otherwise.
    pub known: Option<Known>,
}

/// What a new prompt's caller read for its run a moment before: the session's record (read
/// to admit the prompt) and its permission state (read with the run's admission,
/// [`crate::store::Store::start_run`]).
pub(super) struct Known {
    pub session: SessionRecord,
    pub permissions: crate::store::PermissionState,
}

impl SessionRuntime {
    /// Forgets an idle session's resources when nothing of them lives on (no background
    /// task, finished or not, no shell, no undelivered notification): an idle session costs
    /// only its rows. A session with tasks or shells keeps them until it closes or expires.
    pub(super) fn release_env(&self, session: &SessionId) {
        let mut envs = self.envs.lock().unwrap_or_else(|e| e.into_inner());
        let unused = envs.get(session).is_some_and(|env| {
            env.shells.tasks.list().is_empty()
                && env.shells.shells.ids().is_empty()
                && env.notifications.lock().is_ok_and(|notes| notes.is_empty())
                && env.mcp.is_empty()
        });
        if unused {
            envs.remove(session);
        }
    }

    fn env_for(
        &self,
        tenant: &TenantId,
        session: &SessionId,
        config: &SessionConfig,
    ) -> Result<Arc<SessionEnv>, RuntimeError> {
        let mut envs = self.envs.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(env) = envs.get(session) {
            return Ok(env.clone());
        }
        // A subagent works in its top-level session's workspace.
        let workspace_session = config
            .subagent
            .as_ref()
            .map(|link| SessionId::from_string(link.workspace_session_id.clone()));
        let workspace = Workspace::create(
            &self.settings.workspaces_dir,
            tenant,
            workspace_session.as_ref().unwrap_or(session),
        )
        .map_err(|error| RuntimeError::Setup(error.to_string()))?;
        let tasks = builtin::tasks::TaskRegistry::new(&self.settings.files_root, session)
            .map_err(|error| RuntimeError::Setup(error.to_string()))?;
        let holds = crate::limits::SessionHolds {
            holds: self.holds.clone(),
            tenant: tenant.clone(),
            session: session.clone(),
        };
        tasks.set_holds(holds.clone());
        let shells = builtin::pty::ShellRegistry::new();
        shells.set_holds(holds);
        let egress_journal = EgressSlot::default();
        let network = self.session_network(tenant, session, config, &egress_journal)?;
        let env = Arc::new(SessionEnv {
            shells: SessionShells {
                sandbox: self.sandbox.clone(),
                network: network.clone(),
                tasks,
                shells,
            },
            snapshots: self.settings.snapshots.as_ref().map(|store| {
                Arc::new(crate::workspace_snapshot::SessionSnapshots::new(
                    store.clone(),
                    tenant,
                    session,
                    workspace.root().to_owned(),
                ))
            }),
            mcp: Arc::new(crate::mcp::SessionMcp::new(
                &config.mcp_servers,
                self.sandbox.clone(),
                network,
                workspace.root(),
                &self.egress,
                self.settings.mcp.idle_stop(),
            )),
            workspace: workspace.root().to_owned(),
            web_cache: Default::default(),
            egress_journal,
            notifications: Arc::new(Mutex::new(Vec::new())),
        });
        if let Some(mut finished) = env.shells.tasks.notifications() {
            let inbox = env.notifications.clone();
            tokio::spawn(async move {
                while let Some(note) = finished.recv().await {
                    let text = format!(
                        "task {} {:?} (exit code {}): {}",
                        note.task_id,
                        note.status,
                        note.exit_code.map_or("none".to_owned(), |c| c.to_string()),
                        note.command
                    );
                    inbox.lock().unwrap_or_else(|e| e.into_inner()).push(text);
                }
            });
        }
        envs.insert(session.clone(), env.clone());
        Ok(env)
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

    /// The network of a session's commands: with `egress`, a proxy endpoint of its own (in
    /// `<data>/egress-proxy/`) deciding by the egress policy with the session's rules, whose
    /// connections are logged with the tenant and session and recorded as `egress` events of
    /// the run going on (`journal`).
    fn session_network(
        &self,
        tenant: &TenantId,
        session: &SessionId,
        config: &SessionConfig,
        journal: &EgressSlot,
    ) -> Result<builtin::SessionNetwork, RuntimeError> {
        use crate::egress::proxy::{PolicyGate, ProxyEndpoint, ProxyLimits, ProxyOutcome};
        if config.network == crate::sandbox::CommandNetwork::None {
            return Ok(builtin::SessionNetwork::None);
        }
        let lists = crate::egress::DomainLists::parse(&config.egress.allow, &config.egress.deny)
            .map_err(RuntimeError::Setup)?;
        let gate = Arc::new(PolicyGate::new(
            self.broker.policy().clone(),
            tenant.as_str(),
            lists,
            Arc::new(journal.clone()),
        ));
        let (tenant, session) = (tenant.to_string(), session.to_string());
        let journal = journal.clone();
        let observer: crate::egress::proxy::ProxyObserver = Arc::new(move |record| {
            match &record.outcome {
                ProxyOutcome::Refused { code, reason } => tracing::warn!(
                    %tenant, %session, method = %record.method, host = %record.host,
                    port = record.port, %code, %reason, "egress proxy refused"
                ),
                ProxyOutcome::Relayed { ended } => tracing::info!(
                    %tenant, %session, method = %record.method, host = %record.host,
                    port = record.port, %ended, bytes_out = record.bytes_out,
                    bytes_in = record.bytes_in, "egress proxy relayed"
                ),
            }
            journal.record_proxy(record);
        });
        let endpoint = ProxyEndpoint::start(
            &self.settings.files_root.join("egress-proxy"),
            gate,
            ProxyLimits::default(),
            observer,
        );
        Ok(builtin::SessionNetwork::Egress(
            endpoint.map(Arc::new).map_err(|error| {
                tracing::warn!(%error, "egress proxy endpoint could not start");
                error.to_string()
            }),
        ))
    }

    /// The tenant's provider settings (or the server's), with the session's model overrides.
    fn provider_config(&self, tenant: &TenantId) -> &ProviderConfig {
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
    fn provider_for(
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

    /// Runs (or, with `start.resume`, continues) one claimed run to its terminal event.
    pub(super) async fn run_one(
        &self,
        tenant: &TenantId,
        session: &SessionId,
        lease: &RunLease,
        start: RunStart,
    ) -> Result<Ended, RuntimeError> {
        let RunStart {
            prompt: text,
            resume,
            started,
            known,
        } = start;
        let run_id = &lease.run_id;
        let (record, permissions) = match known {
            Some(Known {
                session,
                permissions,
            }) => (session, Some(permissions)),
            None => (
                self.store
                    .get_session(tenant, session)
                    .await?
                    .ok_or(RuntimeError::Closed)?,
                None,
            ),
        };
        let config: SessionConfig = serde_json::from_value(record.config)
            .map_err(|error| RuntimeError::Setup(error.to_string()))?;
        let writer = self.run_writer(tenant, session, lease);
        writer.count_run_end(self.settings.metrics.clone(), started);
        let ids = crate::telemetry::genai::RunIds {
            tenant: tenant.clone(),
            session: session.clone(),
            run: run_id.clone(),
        };
        let trail = if resume {
            self.store
                .list_run_events(tenant, session, run_id, resume::TRAIL_KINDS)
                .await?
        } else {
            Vec::new()
        };
        // A claimed run that never wrote its prompt (the crash came first) starts afresh.
        let resuming = resume::started(&trail);
        let prompt_records = if resuming {
            None
        } else {
            let prompt = Message::user_text(text.clone());
            let stored = writer
                .write_returning(
                    vec![NewMessage {
                        message: prompt,
                        run_id: Some(run_id.to_string()),
                        compaction_boundary: false,
                    }],
                    vec![RunEvent::RunStarted(run_event::RunStarted {
                        run_id: run_id.to_string(),
                        prompt: text.clone(),
                    })],
                )
                .await
                .map_err(|error| RuntimeError::from_write(&writer, error))?;
            Some(stored)
        };

        let env = self.env_for(tenant, session, &config)?;
        self.restore_workspace(tenant, session, &env).await?;
        env.egress_journal.set(Arc::new(RunJournal {
            writer: writer.clone(),
        }));
        let rules = RuleSet::parse(&config.permission.allow, &config.permission.deny)
            .map_err(|error| RuntimeError::Setup(error.to_string()))?;
        // The live grants and the durable mode override (it wins over the configured mode).
        let permissions = match permissions {
            Some(permissions) => permissions,
            None => self.store.permission_state(tenant, session).await?,
        };
        let grants = Arc::new(approvals::LiveGrants::default());
        for grant in &permissions.grants {
            grants.add(&grant.id, &grant.rule, grant.scope);
        }
        self.approvals.track_session(session, grants.clone());
        let configured_mode = config.permission.mode;
        let mode = permissions.mode.map_or(configured_mode, |state| state.mode);
        let mode = Arc::new(std::sync::RwLock::new(mode));
        let gate = Arc::new(approvals::LiveGate {
            mode: mode.clone(),
            rules,
            grants: grants.clone(),
            workspace: Some(env.workspace.clone()),
        });
        let web_fetch =
            self.web_fetch_tool(tenant, session, &config, &env, &writer, gate.clone())?;
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
            .chain(self.web_search_tool(tenant, &config, &writer)?)
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
                let read_only: crate::noa::ToolNames = registry
                    .names()
                    .filter(|name| {
                        registry
                            .lookup(name)
                            .is_some_and(|entry| entry.tool.is_read_only(&serde_json::json!({})))
                    })
                    .map(str::to_owned)
                    .collect();
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
        let hidden = registry.deferred_tools();
        if !hidden.is_empty() {
            // Only a session with deferred tools can have unlocked any: no read otherwise.
            for name in self.store.unlocked_tools(tenant, session).await? {
                unlocked.unlock(&name);
            }
            let inner = hidden
                .iter()
                .filter_map(|tool| registry.lookup(&tool.name))
                .map(|entry| entry.tool.clone())
                .collect();
            for tool in [
                crate::tools::deferred::search_tool(hidden, unlocked.clone()),
                crate::tools::deferred::execute_tool(inner),
            ] {
                registry
                    .register(tool)
                    .map_err(|error| RuntimeError::Setup(error.to_string()))?;
            }
        }
        // Skills (only for sessions that offer them: no read otherwise).
        if let Some(tool) = self
            .skill_tool(
                tenant,
                session,
                &config,
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
                &config,
                (&writer, &mode, &unlocked),
                resuming,
            )
            .await?;
        // Hooks and the approval webhook post through the shared client, recording each
        // request as an `egress` event of this run.
        let egress = self.egress.recording(Arc::new(RunJournal {
            writer: writer.clone(),
        }));
        let recording_catalog;
        let catalog = if config.hooks.is_empty() {
            &self.hook_catalog
        } else {
            recording_catalog = self.hook_catalog.clone().with_egress(egress.clone());
            &recording_catalog
        };
        let (hooks, _statuses) = HookRunner::from_config(&config.hooks, catalog)
            .map_err(|error| RuntimeError::Setup(error.to_string()))?;
        let cancel = self.cancel_token(session);
        let park = Arc::new(approvals::ParkState::default());
        let approver = approvals::RunApprover {
            store: self.store.clone(),
            writer: writer.clone(),
            hub: self.hub.clone(),
            approvals: self.approvals.clone(),
            tenant: tenant.clone(),
            session: session.clone(),
            run_id: run_id.clone(),
            timeout: std::time::Duration::from_secs(config.approvals.timeout_seconds),
            on_timeout: config.approvals.on_timeout,
            grants: grants.clone(),
            cancel: cancel.clone(),
            webhook: config.approvals.webhook.clone(),
            egress,
            resumed: resuming,
            park_after: self.settings.approval_park_after,
            park: park.clone(),
            max_pending: self.settings.limits.pending_approvals,
            handoff: self.shutdown.clone(),
            metrics: self.settings.metrics.clone(),
        };
        if !env.mcp.is_empty() {
            // Elicitations wait in process: the call asking is already executing.
            env.mcp.set_elicitor(Some(Arc::new(approvals::RunApprover {
                park_after: None,
                ..approver.clone()
            })));
        }
        let pipeline = Pipeline::new(registry, gate.clone())
            .with_hooks(hooks)
            .with_approver(Arc::new(approver))
            .with_journal(Arc::new(RunJournal {
                writer: writer.clone(),
            }))
            .with_quota(Arc::new(workspace_quota::WorkspaceQuota {
                store: self.store.clone(),
                tenant: tenant.clone(),
                session: session.clone(),
                workspace: env.workspace.clone(),
                task_logs: self
                    .settings
                    .files_root
                    .join("tasks")
                    .join(session.as_str()),
                limits: self.settings.limits.clone(),
                writer: writer.clone(),
            }))
            .with_output_policy(crate::tools::output::OutputPolicy {
                head_chars: self.settings.output_head_chars,
                spill: true,
            });

        let flusher_stop = CancellationToken::new();
        let flusher = tokio::spawn(writer.clone().run_flusher(flusher_stop.clone()));
        let host = Arc::new(StoreHost {
            writer: writer.clone(),
            pipeline,
            tenant: tenant.clone(),
            session: session.clone(),
            run_id: run_id.clone(),
            workspace: Some(env.workspace.clone()),
            file_io: match self.settings.workspace_storage {
                crate::config::WorkspaceStorage::Shared => crate::tools::FileIo::Pooled,
                crate::config::WorkspaceStorage::Local
                | crate::config::WorkspaceStorage::Snapshot => crate::tools::FileIo::Local,
            },
            unlocked: unlocked.clone(),
            notifications: env.notifications.clone(),
            store: self.store.clone(),
            grants: grants.clone(),
            mode,
            configured_mode,
            park: park.clone(),
            handoff: self.shutdown.clone(),
            snapshots: env
                .snapshots
                .clone()
                .map(|snapshots| (snapshots, self.settings.limits.workspace_bytes)),
            budgets: self.budgets.for_run(),
            metrics: self.settings.metrics.clone(),
            ids: ids.clone(),
            capture_content: self.settings.capture_content,
            delegated,
            mcp_refresh: (!env.mcp.is_empty()).then(|| crate::mcp::refresh::McpRefresh {
                mcp: env.mcp.clone(),
                unlocked: unlocked.clone(),
            }),
        });
        let provider = self.provider_for(&ids, &config)?;
        let meter = self.usage_meter(tenant, &config)?;
        // The budget may have changed since the prompt was accepted (queued, resumed runs);
        // without a budget, this read serves the first turn's check too.
        host.budgets.ensure_priced(tenant, &meter).await?;
        writer.meter_usage(meter);
        if !env.mcp.is_empty() {
            env.mcp
                .set_sampler(Some(Arc::new(super::mcp_sampling::RunSampler {
                    provider: provider.clone(),
                    model: config
                        .model
                        .name
                        .clone()
                        .unwrap_or_else(|| self.provider_config(tenant).model.clone()),
                    writer: writer.clone(),
                    budgets: self.budgets.clone(),
                    tenant: tenant.clone(),
                    cancel: cancel.clone(),
                })));
        }
        let engine = Engine {
            provider,
            host: host.clone(),
            config: EngineConfig {
                model: config
                    .model
                    .name
                    .clone()
                    .unwrap_or_else(|| self.provider_config(tenant).model.clone()),
                system: config.system_prompt.clone(),
                max_tokens: config
                    .model
                    .max_tokens
                    .unwrap_or(self.provider_config(tenant).max_tokens),
                limits: TurnLimits {
                    max_turns: config.budgets.max_turns,
                    token_budget: config.budgets.max_tokens,
                    ..TurnLimits::default()
                },
                ..EngineConfig::default()
            },
            policy: noa.map(|noa| {
                Arc::new(crate::noa::session::NoaPolicy(noa))
                    as Arc<dyn crate::harness::context::ContextPolicy>
            }),
        };
        // A session's first run: its prompt was stored as the first message (`seq` 1, in the
        // run's own transaction, and the run holds the session), so that is the history.
        let records = match prompt_records {
            Some(stored) if stored.first().is_some_and(|record| record.seq == 1) => stored,
            _ => {
                self.store
                    .list_messages(tenant, session, 0, u32::MAX)
                    .await?
            }
        };
        let (messages, boundary) = history_of(&records);
        let mut history = RunHistory { messages, boundary };
        let mut ledger = RunLedger::new(tenant.clone(), session.clone(), run_id.clone());
        if resuming {
            // Model calls made before the resume count too (the usage ledger has them).
            ledger.prior = self
                .store
                .usage_totals(
                    tenant,
                    crate::usage::UsageScope::Run {
                        session: session.as_str(),
                        run: run_id.as_str(),
                    },
                )
                .await?
                .into();
        }
        let recovered = if resuming {
            resume::recover(
                &resume::Resumed {
                    store: self.store.as_ref(),
                    host: host.as_ref(),
                    tenant,
                    session,
                    run_id,
                    replica: &self.settings.replica_id,
                },
                &trail,
                &records,
                &mut history,
                &cancel,
            )
            .await
        } else {
            Ok(resume::Recovery::Continue { main_turn: 1 })
        };
        let outcome = match recovered {
            Ok(resume::Recovery::Continue { main_turn }) => engine
                .run_from(history, &mut ledger, cancel, main_turn)
                .await
                .map(|outcome| match outcome.terminal {
                    crate::harness::turn::TerminalReason::Parked => Ended::Parked(park.waiting()),
                    _ => Ended::Finished,
                })
                .map_err(|error| RuntimeError::from_write(&writer, error)),
            Ok(resume::Recovery::Finished) => Ok(Ended::Finished),
            Ok(resume::Recovery::Parked) => Ok(Ended::Parked(park.waiting())),
            Err(error) => Err(error),
        };
        self.approvals.untrack_session(session);
        flusher_stop.cancel();
        let _ = flusher.await;
        outcome
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
        let read_only = registry
            .names()
            .filter(|name| {
                registry
                    .lookup(name)
                    .is_some_and(|entry| entry.tool.is_read_only(&serde_json::json!({})))
            })
            .map(str::to_owned)
            .collect();
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

//! Building and driving one run: the permission gate, the approver, the pipeline, the host and
//! the engine that runs the claimed run — or continues it after a crash, a hand-off or
//! parking — to its end, over the session's live environment ([`super::session_env`]), the
//! run's tools ([`super::run_tools`]) and its provider ([`super::run_provider`]).

use super::run_tools::RunTools;
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
        let RunTools {
            registry,
            noa,
            unlocked,
            delegated,
        } = self
            .run_tools(
                (tenant, session, run_id),
                &config,
                &env,
                &writer,
                &gate,
                &mode,
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
        // The run's loop, on this task, with the writing of what it buffers (deltas, progress).
        let outcome = writer
            .lingering(async {
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
                match recovered {
                    Ok(resume::Recovery::Continue { main_turn }) => engine
                        .run_from(history, &mut ledger, cancel, main_turn)
                        .await
                        .map(|outcome| match outcome.terminal {
                            crate::harness::turn::TerminalReason::Parked => {
                                Ended::Parked(park.waiting())
                            }
                            _ => Ended::Finished,
                        })
                        .map_err(|error| RuntimeError::from_write(&writer, error)),
                    Ok(resume::Recovery::Finished) => Ok(Ended::Finished),
                    Ok(resume::Recovery::Parked) => Ok(Ended::Parked(park.waiting())),
                    Err(error) => Err(error),
                }
            })
            .await;
        self.approvals.untrack_session(session);
        outcome
    }
}

//! A session's live environment on this replica: its workspace, background tasks and shells,
//! MCP servers, snapshots, command network and task notifications — built with the session's
//! first run here and forgotten when nothing of it lives on.

use super::*;

impl SessionRuntime {
    /// Forgets an idle session's resources when nothing of them lives on (no background
    /// task, finished or not, no shell, no undelivered notification): an idle session costs
    /// only its rows. A session with tasks or shells keeps them until it closes or expires.
    pub(super) fn release_env(&self, session: &SessionId) {
        let mut envs = self.envs.lock().unwrap_or_else(|e| e.into_inner());
        let unused = envs.get(session).is_some_and(|env| {
            env.shells.tasks.list().is_empty()
                && env.shells.shells.ids().is_empty()
                && env.notifications.is_empty()
                && env.mcp.is_empty()
        });
        if unused {
            envs.remove(session);
        }
    }

    /// The session's live environment, built on first need (its workspace is created then) and
    /// shared by its runs until [`SessionRuntime::release_env`] forgets it.
    pub(super) fn env_for(
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
        let finished = tasks.notifications();
        let shells = builtin::pty::ShellRegistry::new();
        shells.set_holds(holds.clone());
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
                holds,
            )),
            workspace: workspace.root().to_owned(),
            web_cache: Default::default(),
            egress_journal,
            notifications: Arc::new(super::task_inbox::TaskInbox::new(finished)),
        });
        envs.insert(session.clone(), env.clone());
        Ok(env)
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
}

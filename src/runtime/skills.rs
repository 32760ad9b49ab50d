//! The session's `Skill` tool, built when a run starts (only for sessions that name skills
//! or take them from their workspace: no store read otherwise): the catalog of registered
//! and workspace skills, what a load may unlock (from the run's registry and rules), and the
//! `skill_loaded` event written into the run's transcript.

use super::*;
use crate::skills::tool::{Availability, CatalogEntry, SkillJournal, SkillSetup, Source};

#[async_trait::async_trait]
impl SkillJournal for RunJournal {
    async fn loaded(&self, event: run_event::SkillLoaded) -> Result<(), String> {
        self.writer
            .write(vec![], vec![RunEvent::SkillLoaded(event)])
            .await
            .map_err(|error| error.0)
    }
}

/// What a skill's load may do with each tool of the registry: a deny rule without an
/// argument part (or `*`) naming the tool — or the tool whose rules judge it, as `Bash` for
/// the shell tools — denies it outright; otherwise deferred tools are unlocked.
pub(super) fn availability(
    registry: &ToolRegistry,
    rules: &RuleSet,
) -> HashMap<String, Availability> {
    registry
        .names()
        .filter_map(|name| registry.lookup(name).map(|entry| (name, entry)))
        .map(|(name, entry)| {
            let judged_as = entry.tool.permission_rules_as();
            let denied = rules.deny.iter().any(|rule| {
                !rule.has_spec()
                    && (rule.names_tool(name) || judged_as.is_some_and(|as_| rule.names_tool(as_)))
            });
            let availability = if denied {
                Availability::Denied
            } else if entry.deferred {
                Availability::Deferred
            } else {
                Availability::Visible
            };
            (name.to_owned(), availability)
        })
        .collect()
}

impl SessionRuntime {
    /// The session's `Skill` tool, or `None` when the session offers no skills.
    #[allow(clippy::too_many_arguments)]
    pub(super) async fn skill_tool(
        &self,
        tenant: &TenantId,
        session: &SessionId,
        config: &SessionConfig,
        registry: &ToolRegistry,
        rules: &RuleSet,
        unlocked: crate::tools::deferred::UnlockSet,
        workspace: &std::path::Path,
        journal: Arc<RunJournal>,
    ) -> Result<Option<crate::tools::DynTool>, RuntimeError> {
        if config.skills.is_empty() && !config.workspace_skills {
            return Ok(None);
        }
        let mut catalog = Vec::new();
        if !config.skills.is_empty() {
            let all = config.skills.iter().any(|name| name == "*");
            for summary in self
                .store
                .list_skills(tenant, self.settings.limits.skills.max(1))
                .await?
            {
                if all || config.skills.contains(&summary.name) {
                    catalog.push(CatalogEntry {
                        name: summary.name,
                        description: summary.description,
                        source: Source::Registered,
                    });
                }
            }
        }
        if config.workspace_skills {
            let root = workspace.to_owned();
            let found =
                tokio::task::spawn_blocking(move || crate::skills::workspace::discover(&root))
                    .await
                    .unwrap_or_default();
            for (name, why) in &found.invalid {
                tracing::info!(skill = %name, reason = %why, "workspace skill not offered");
            }
            for skill in found.skills {
                if catalog.iter().any(|entry| entry.name == skill.name) {
                    // A registered skill of the same name wins.
                    continue;
                }
                catalog.push(CatalogEntry {
                    name: skill.name,
                    description: skill.description,
                    source: Source::Workspace,
                });
            }
        }
        Ok(Some(crate::skills::tool::skill_tool(SkillSetup {
            tenant: tenant.clone(),
            session: session.clone(),
            store: self.store.clone(),
            catalog,
            workspace_skills: config.workspace_skills,
            tools: availability(registry, rules),
            unlocked,
            journal,
        })))
    }
}

//! The tenant's skill registry: `/v1/skills` (see `crate::skills`). Writing needs the
//! `tenant:admin` scope; reading needs `sessions:read` (or `tenant:admin`). A refused skill is
//! `422 INVALID_REQUEST` with `details.field` and a stable `details.reason`
//! (`crate::skills::reasons`).

use crate::api::extract::AppJson;
use crate::app::AppState;
use crate::auth::{Principal, scopes};
use crate::error::{ApiError, ApiResult, ErrorBody};
use crate::ids::TenantId;
use crate::skills::{NewSkillBody, SkillError, SkillFile};
use crate::store::{NewSkill, SkillRecord, SkillSummary};
use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use utoipa::ToSchema;

/// A registered skill, whole.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct Skill {
    pub name: String,
    pub description: String,
    /// The deferred tools the skill unlocks when loaded.
    pub tools: Vec<String>,
    /// The `SKILL.md` as registered.
    pub content: String,
    pub files: Vec<SkillFile>,
    /// Bytes of the `SKILL.md` and files.
    pub size_bytes: i64,
    pub created_at: DateTime<Utc>,
}

/// A registered skill without its content.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct SkillListItem {
    pub name: String,
    pub description: String,
    pub tools: Vec<String>,
    pub size_bytes: i64,
    pub created_at: DateTime<Utc>,
}

/// The tenant's skills, by name.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct SkillList {
    pub skills: Vec<SkillListItem>,
}

impl From<SkillRecord> for Skill {
    fn from(record: SkillRecord) -> Self {
        Self {
            name: record.name,
            description: record.description,
            tools: record.tools,
            content: record.content,
            files: record.files,
            size_bytes: record.size_bytes,
            created_at: record.created_at,
        }
    }
}

impl From<SkillSummary> for SkillListItem {
    fn from(summary: SkillSummary) -> Self {
        Self {
            name: summary.name,
            description: summary.description,
            tools: summary.tools,
            size_bytes: summary.size_bytes,
            created_at: summary.created_at,
        }
    }
}

impl From<SkillError> for ApiError {
    fn from(error: SkillError) -> Self {
        ApiError::invalid(format!("invalid skill: {error}"))
            .with_details(json!({ "field": error.field, "reason": error.reason }))
    }
}

fn require_read(principal: &Principal) -> ApiResult<()> {
    principal
        .require(scopes::SESSIONS_READ)
        .or_else(|_| principal.require(scopes::TENANT_ADMIN))
}

fn parse_body(body: Value) -> ApiResult<NewSkillBody> {
    if !body.is_object() {
        return Err(ApiError::invalid("invalid skill: must be a JSON object")
            .with_details(json!({ "field": "(root)" })));
    }
    serde_path_to_error::deserialize(body).map_err(|error| {
        let path = error.path().to_string();
        let field = if path == "." || path.is_empty() {
            "(root)".to_owned()
        } else {
            path
        };
        ApiError::invalid(format!("invalid skill: {field}: {}", error.into_inner()))
            .with_details(json!({ "field": field }))
    })
}

/// Registers a skill for the tenant's sessions (they offer it by naming it in `skills`).
#[utoipa::path(post, path = "/v1/skills", tag = "skills",
    request_body = NewSkillBody,
    responses((status = 201, body = Skill),
              (status = 403, description = "FORBIDDEN_SCOPE: needs `tenant:admin`", body = ErrorBody),
              (status = 409, description = "CONFLICT: a skill of that name is registered", body = ErrorBody),
              (status = 422, description = "INVALID_REQUEST: `details.field` names the field, `details.reason` is SKILL_FRONT_MATTER_INVALID, SKILL_NAME_INVALID, SKILL_DESCRIPTION_INVALID, SKILL_UNKNOWN_TOOL, SKILL_TOO_LARGE, SKILL_TOO_MANY or SKILL_FILE_PATH_INVALID", body = ErrorBody),
              (status = 429, description = "TENANT_LIMIT: `skills` registered skills", body = ErrorBody)),
    security(("bearer" = [])))]
pub async fn create_skill(
    State(state): State<AppState>,
    principal: Principal,
    AppJson(body): AppJson<Value>,
) -> ApiResult<Response> {
    principal.require(scopes::TENANT_ADMIN)?;
    let body = parse_body(body)?;
    let definition = crate::skills::check_body(&body)?;
    let record = state
        .store
        .create_skill(
            &principal.tenant,
            &NewSkill {
                name: definition.name.clone(),
                description: definition.description,
                tools: definition.tools,
                content: body.content,
                files: body.files,
            },
            state.settings.limits.skills,
        )
        .await?;
    tracing::info!(skill = %definition.name, "skill registered");
    Ok((StatusCode::CREATED, Json(Skill::from(record))).into_response())
}

/// The tenant's registered skills, by name (without content).
#[utoipa::path(get, path = "/v1/skills", tag = "skills",
    responses((status = 200, body = SkillList)),
    security(("bearer" = [])))]
pub async fn list_skills(
    State(state): State<AppState>,
    principal: Principal,
) -> ApiResult<Json<SkillList>> {
    require_read(&principal)?;
    let skills = state
        .store
        .list_skills(&principal.tenant, state.settings.limits.skills.max(1))
        .await?;
    Ok(Json(SkillList {
        skills: skills.into_iter().map(Into::into).collect(),
    }))
}

/// One registered skill with its content and files. Another tenant's skill answers 404 like
/// a missing one.
#[utoipa::path(get, path = "/v1/skills/{name}", tag = "skills",
    params(("name" = String, Path, description = "Skill name")),
    responses((status = 200, body = Skill)),
    security(("bearer" = [])))]
pub async fn get_skill(
    State(state): State<AppState>,
    principal: Principal,
    Path(name): Path<String>,
) -> ApiResult<Json<Skill>> {
    require_read(&principal)?;
    let record = state
        .store
        .get_skill(&principal.tenant, &name)
        .await?
        .ok_or_else(|| ApiError::not_found("skill"))?;
    Ok(Json(record.into()))
}

/// Deletes a registered skill. Sessions naming it stop offering it from their next run;
/// what a run already loaded stays in its history, and tools it unlocked stay unlocked.
#[utoipa::path(delete, path = "/v1/skills/{name}", tag = "skills",
    params(("name" = String, Path, description = "Skill name")),
    responses((status = 204, description = "Deleted"),
              (status = 403, description = "FORBIDDEN_SCOPE: needs `tenant:admin`", body = ErrorBody)),
    security(("bearer" = [])))]
pub async fn delete_skill(
    State(state): State<AppState>,
    principal: Principal,
    Path(name): Path<String>,
) -> ApiResult<StatusCode> {
    principal.require(scopes::TENANT_ADMIN)?;
    if !state.store.delete_skill(&principal.tenant, &name).await? {
        return Err(ApiError::not_found("skill"));
    }
    tracing::info!(skill = %name, "skill deleted");
    Ok(StatusCode::NO_CONTENT)
}

/// Checks at session creation that every skill a session names is registered (`422` naming
/// `skills[i]` otherwise).
pub async fn check_session_skills(
    state: &AppState,
    tenant: &TenantId,
    names: &[String],
) -> ApiResult<()> {
    for (index, name) in names.iter().enumerate() {
        if name == "*" {
            continue;
        }
        if state.store.get_skill(tenant, name).await?.is_none() {
            let field = format!("skills[{index}]");
            return Err(ApiError::invalid(format!(
                "invalid session config: {field}: no skill named `{name}` is registered"
            ))
            .with_details(json!({ "field": field })));
        }
    }
    Ok(())
}

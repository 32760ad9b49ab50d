//! Approvals (answered by a policy service or a person) and the grants they add.

use crate::api::extract::{AppJson, AppQuery};
use crate::api::runs::load_owned_session;
use crate::app::AppState;
use crate::auth::{Principal, scopes};
use crate::error::{ApiError, ApiResult, ErrorBody, ErrorCode};
use crate::ids::{ApprovalId, GrantId, SessionId};
use crate::permission::Rule;
use crate::runtime::DecideError;
use crate::store::{
    ApprovalDecision, ApprovalRecord, ApprovalStatus, GrantRecord, GrantScope, NewGrant,
};
use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use utoipa::{IntoParams, ToSchema};

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct ApprovalFilter {
    /// Only approvals in this state (e.g. `pending`).
    pub status: Option<ApprovalStatus>,
    /// Approvals created after this one (the `next_after` of the previous page); an id that
    /// names no approval of this session is `422 INVALID_REQUEST`.
    #[param(max_length = 128)]
    pub after: Option<String>,
    /// Page size, 1..=1000 (default 100); outside that range `422 INVALID_REQUEST`. A page
    /// also ends after the approval that brings it to 4 MiB of inputs and reasons (one larger
    /// approval comes alone).
    #[param(minimum = 1, maximum = 1000)]
    pub limit: Option<u32>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct ApprovalList {
    /// Oldest first.
    pub approvals: Vec<ApprovalRecord>,
    /// Pass as `after` for the next page; absent on the last page (present on a page that
    /// ended at its limit or byte bound, whose next page may be empty).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_after: Option<String>,
}

/// Allow or deny.
#[derive(Clone, Copy, Debug, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    Allow,
    Deny,
}

/// A grant to add with an `allow`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct GrantRequest {
    pub scope: GrantScope,
    /// A permission rule the grant allows (default: exactly this tool's name): `*`, `Name`
    /// or `Name(spec)`, the grammar of `permission.allow` (README "Permissions");
    /// a malformed rule is `422 INVALID_REQUEST` with `details.field` = `grant.rule`.
    pub rule: Option<String>,
    /// Lifetime in seconds, at least 1 (default: no expiry; `once` grants end when used);
    /// longer than a year counts as a year.
    #[schema(minimum = 1)]
    pub ttl_seconds: Option<u64>,
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ApprovalAnswerRequest {
    pub decision: Verdict,
    /// Human reason, kept in the audit record.
    pub reason: Option<String>,
    /// Replaces the tool input; it is validated and permission-checked again and cannot widen
    /// the call.
    #[schema(value_type = Option<Object>)]
    pub updated_input: Option<Value>,
    pub grant: Option<GrantRequest>,
}

/// The session's approval requests, so a reconnecting client sees what is waiting.
#[utoipa::path(get, path = "/v1/sessions/{id}/approvals", tag = "approvals",
    params(("id" = String, Path, description = "Session id"), ApprovalFilter),
    responses((status = 200, body = ApprovalList)),
    security(("bearer" = [])))]
pub async fn list_approvals(
    State(state): State<AppState>,
    principal: Principal,
    Path(id): Path<String>,
    AppQuery(filter): AppQuery<ApprovalFilter>,
) -> ApiResult<Json<ApprovalList>> {
    principal.require(scopes::SESSIONS_READ)?;
    let limit = filter.limit.unwrap_or(100);
    if !(1..=1000).contains(&limit) {
        return Err(ApiError::invalid("limit must be between 1 and 1000")
            .with_details(json!({ "field": "limit" })));
    }
    let session = load_owned_session(&state, &principal, id).await?;
    let after = filter.after.map(ApprovalId::from_string);
    if let Some(after) = &after {
        let known = after.as_str().len() <= 128
            && state
                .store
                .get_approval(&principal.tenant, &session.id, after)
                .await?
                .is_some();
        if !known {
            return Err(ApiError::invalid("after names no approval of this session")
                .with_details(json!({ "field": "after" })));
        }
    }
    let approvals = state
        .store
        .list_approvals_page(
            &principal.tenant,
            &session.id,
            filter.status,
            after.as_ref(),
            limit,
        )
        .await?;
    let next_after = crate::api::next_after(&approvals, limit, ApprovalRecord::page_bytes, |a| {
        a.id.as_str()
    });
    Ok(Json(ApprovalList {
        approvals,
        next_after,
    }))
}

/// Answers an approval request, exactly once: a second answer gets `409
/// APPROVAL_ALREADY_DECIDED`, an answer after expiry `409 APPROVAL_EXPIRED`.
#[utoipa::path(post, path = "/v1/sessions/{id}/approvals/{approval_id}", tag = "approvals",
    params(("id" = String, Path, description = "Session id"), ("approval_id" = String, Path, description = "Approval id")),
    request_body = ApprovalAnswerRequest,
    responses((status = 200, body = ApprovalRecord),
              (status = 409, description = "APPROVAL_ALREADY_DECIDED or APPROVAL_EXPIRED", body = ErrorBody),
              (status = 422, body = ErrorBody, description = "INVALID_REQUEST: `updated_input` not an object, nested deeper than 64 levels or not valid for the tool, a malformed `grant.rule`, `grant.ttl_seconds` 0, a grant with a `deny`")),
    security(("bearer" = [])))]
pub async fn answer_approval(
    State(state): State<AppState>,
    principal: Principal,
    Path((id, approval_id)): Path<(String, String)>,
    AppJson(answer): AppJson<ApprovalAnswerRequest>,
) -> ApiResult<Json<ApprovalRecord>> {
    principal.require(scopes::APPROVALS_WRITE)?;
    // The approval is read by tenant and session: found, it proves the session is the
    // caller's (no read of the session first, one round trip less on the way to the run).
    let session = SessionId::from_string(id);
    tracing::Span::current().record("session_id", session.as_str());
    decide_answer(&state, &principal, &session, approval_id, answer)
        .await
        .map(Json)
}

/// Answers an approval of `session` for `principal` (who holds `approvals:write`): the one
/// path of the REST answer and of AG-UI `resume[]`, exactly once through `Approvals::decide`.
/// `404` naming the session when it is not the caller's, the approval when the session has
/// no such approval.
pub(crate) async fn decide_answer(
    state: &AppState,
    principal: &Principal,
    session: &SessionId,
    approval_id: String,
    answer: ApprovalAnswerRequest,
) -> ApiResult<ApprovalRecord> {
    let approval_id = ApprovalId::from_string(approval_id);
    let Some(existing) = state
        .store
        .get_approval(&principal.tenant, session, &approval_id)
        .await?
    else {
        let ours = state.store.get_session(&principal.tenant, session).await?;
        return Err(ApiError::not_found(if ours.is_some() {
            "approval"
        } else {
            "session"
        }));
    };
    if let Some(input) = &answer.updated_input {
        let invalid =
            |why: String| ApiError::invalid(why).with_details(json!({ "field": "updated_input" }));
        if !input.is_object() {
            return Err(invalid("updated_input must be a JSON object".into()));
        }
        if !crate::message::tool_input_within_depth(input) {
            return Err(invalid(format!(
                "updated_input nests deeper than {} levels",
                crate::message::MAX_TOOL_INPUT_DEPTH
            )));
        }
    }
    if crate::mcp::elicitation::is_elicitation(&existing.input)
        && existing.tool_name.starts_with("mcp__")
        && existing.status == ApprovalStatus::Pending
    {
        // An MCP server's elicitation: an allow carries the values, checked against the
        // schema the server requested; it never adds a grant.
        if answer.grant.is_some() {
            return Err(
                ApiError::invalid("an elicitation answer cannot add a grant")
                    .with_details(json!({ "field": "grant" })),
            );
        }
        if matches!(answer.decision, Verdict::Allow) {
            crate::mcp::elicitation::answer_content(&existing.input, answer.updated_input.as_ref())
                .map_err(|why| {
                    ApiError::invalid(why).with_details(json!({ "field": "updated_input.content" }))
                })?;
        }
    }
    let grant = match (&answer.decision, &answer.grant) {
        (Verdict::Allow, Some(grant)) => {
            let rule = grant
                .rule
                .clone()
                .unwrap_or_else(|| existing.tool_name.clone());
            Rule::parse(&rule).map_err(|error| {
                ApiError::invalid(format!("invalid grant rule: {error}"))
                    .with_details(json!({ "field": "grant.rule" }))
            })?;
            let expires_at = match grant.ttl_seconds {
                Some(0) => return Err(ApiError::invalid("grant.ttl_seconds must be positive")),
                Some(secs) => Some(
                    chrono::Utc::now()
                        + chrono::Duration::seconds(
                            i64::try_from(secs)
                                .unwrap_or(i64::MAX / 2)
                                .min(365 * 86_400),
                        ),
                ),
                None => None,
            };
            Some(NewGrant {
                id: GrantId::generate(),
                session: session.clone(),
                scope: grant.scope,
                rule,
                created_by: principal.subject.clone(),
                approval_id: Some(approval_id.to_string()),
                expires_at,
            })
        }
        (Verdict::Deny, Some(_)) => {
            return Err(ApiError::invalid("a grant can only come with an allow"));
        }
        (_, None) => None,
    };
    let decision = ApprovalDecision {
        status: match answer.decision {
            Verdict::Allow => ApprovalStatus::Allowed,
            Verdict::Deny => ApprovalStatus::Denied,
        },
        decided_by: principal.subject.clone(),
        reason: answer.reason.clone(),
        updated_input: answer.updated_input.clone(),
        grant,
    };
    let decided = state
        .runtime
        .approvals()
        .decide(&principal.tenant, session, &approval_id, decision)
        .await;
    match decided {
        Ok(record) => Ok(record),
        Err(DecideError::NotFound) => Err(ApiError::not_found("approval")),
        Err(DecideError::Expired(_)) => Err(ApiError::new(
            ErrorCode::ApprovalExpired,
            "the approval request expired",
        )),
        Err(DecideError::AlreadyDecided(_)) => Err(ApiError::new(
            ErrorCode::ApprovalAlreadyDecided,
            "the approval was already decided",
        )),
        Err(DecideError::Store(error)) => Err(error.into()),
    }
}

#[derive(Debug, Serialize, ToSchema)]
pub struct GrantList {
    pub grants: Vec<GrantRecord>,
}

/// Grants in force for the session (its own and the tenant's).
#[utoipa::path(get, path = "/v1/sessions/{id}/grants", tag = "approvals",
    params(("id" = String, Path, description = "Session id")),
    responses((status = 200, body = GrantList)),
    security(("bearer" = [])))]
pub async fn list_grants(
    State(state): State<AppState>,
    principal: Principal,
    Path(id): Path<String>,
) -> ApiResult<Json<GrantList>> {
    principal.require(scopes::SESSIONS_READ)?;
    let session = load_owned_session(&state, &principal, id).await?;
    let grants = state
        .store
        .list_grants(&principal.tenant, &session.id)
        .await?;
    Ok(Json(GrantList { grants }))
}

/// Revokes a grant; later calls no longer match it.
#[utoipa::path(delete, path = "/v1/sessions/{id}/grants/{grant_id}", tag = "approvals",
    params(("id" = String, Path, description = "Session id"), ("grant_id" = String, Path, description = "Grant id")),
    responses((status = 204, description = "Revoked"),
              (status = 404, body = ErrorBody, description = "NOT_FOUND: no such session, or no grant in force for it with this id")),
    security(("bearer" = [])))]
pub async fn revoke_grant(
    State(state): State<AppState>,
    principal: Principal,
    Path((id, grant_id)): Path<(String, String)>,
) -> ApiResult<StatusCode> {
    principal.require(scopes::APPROVALS_WRITE)?;
    let session = load_owned_session(&state, &principal, id).await?;
    let in_force = state
        .store
        .list_grants(&principal.tenant, &session.id)
        .await?;
    if !in_force.iter().any(|g| g.id == grant_id) {
        return Err(ApiError::not_found("grant"));
    }
    if !state
        .store
        .revoke_grant(&principal.tenant, &GrantId::from_string(grant_id.clone()))
        .await?
    {
        return Err(ApiError::not_found("grant"));
    }
    state.runtime.approvals().grant_revoked(&grant_id);
    Ok(StatusCode::NO_CONTENT)
}

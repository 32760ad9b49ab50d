//! Outbound webhook subscriptions and their delivery logs (see [`crate::webhooks`]).
//!
//! A tenant-wide subscription (every session of the tenant) needs the `tenant:admin` scope to
//! create or delete; one limited to a session (`session_id`) needs `sessions:write`. Reading
//! needs `sessions:read`. The signing secret is in the creation answer only.

use crate::api::extract::{AppJson, AppQuery};
use crate::app::AppState;
use crate::auth::{Principal, scopes};
use crate::error::{ApiError, ApiResult, ErrorBody, ErrorCode};
use crate::ids::SessionId;
use crate::store::SessionStatus;
use crate::webhooks::{DeliveryRecord, NewWebhook, WebhookRecord, check_request, webhook_id};
use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use serde::{Deserialize, Serialize};
use serde_json::json;
use utoipa::{IntoParams, ToSchema};

/// The most deliveries one page returns.
pub const MAX_DELIVERIES_PAGE: u32 = 100;

/// A subscription to create.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateWebhookRequest {
    /// `https://…` (or `http://…`), at most 2048 bytes, without credentials. An IP-literal
    /// host must be public (or in `egress.allow_private_cidrs`); a host name is checked each
    /// time it is resolved.
    pub url: String,
    /// 1 to 5 distinct events: `run.completed`, `run.failed`, `run.parked`,
    /// `approval.requested`, `session.closed`.
    pub events: Vec<String>,
    /// Only this session's events (needs `sessions:write`); absent: every session of the
    /// tenant (needs `tenant:admin`).
    #[serde(default)]
    pub session_id: Option<String>,
}

/// A created subscription, with its signing secret (shown this once).
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct CreatedWebhook {
    #[serde(flatten)]
    pub webhook: WebhookRecord,
    /// `whsec_<base64>`: verify deliveries with it (Standard Webhooks). Never shown again.
    pub secret: String,
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct WebhookList {
    pub webhooks: Vec<WebhookRecord>,
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct ListWebhooksParams {
    /// List this session's subscriptions instead of the tenant-wide ones.
    pub session_id: Option<String>,
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct DeliveriesParams {
    /// Only deliveries with a `position` below this (the previous page's `next_before`).
    pub before: Option<i64>,
    /// Most deliveries returned, 1..=100 (default 50).
    pub limit: Option<u32>,
}

/// A page of a subscription's deliveries, newest first.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct DeliveryList {
    pub deliveries: Vec<DeliveryRecord>,
    /// Pass as `before` for the next (older) page; absent on the last page.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_before: Option<i64>,
}

/// Tenant-wide subscriptions need `tenant:admin`, a session's `sessions:write`.
fn require_write(principal: &Principal, session: Option<&str>) -> ApiResult<()> {
    match session {
        Some(_) => principal.require(scopes::SESSIONS_WRITE),
        None => principal.require(scopes::TENANT_ADMIN),
    }
}

/// Subscribes a URL to events of the tenant's sessions (or of one session). The answer
/// carries the signing secret, which is never shown again.
#[utoipa::path(post, path = "/v1/webhooks", tag = "webhooks",
    request_body = CreateWebhookRequest,
    responses(
        (status = 201, body = CreatedWebhook),
        (status = 400, body = ErrorBody, description = "`INVALID_JSON`"),
        (status = 401, body = ErrorBody),
        (status = 403, body = ErrorBody, description = "`FORBIDDEN_SCOPE`: tenant-wide needs `tenant:admin`, a session's needs `sessions:write`"),
        (status = 404, body = ErrorBody, description = "`NOT_FOUND`: no such session of the tenant"),
        (status = 409, body = ErrorBody, description = "`SESSION_CLOSED`"),
        (status = 422, body = ErrorBody, description = "`INVALID_REQUEST` (`details.field` is `url` or `events`): a malformed, too long (over 2048 bytes), non-http(s), credential-carrying or non-public IP-literal URL, an unknown or repeated event, none or more than 5; `WEBHOOK_LIMIT`: the tenant already has `webhooks.max_per_tenant` tenant-wide subscriptions (default 20) or the session `webhooks.max_per_session` (default 5)"),
        (status = 503, body = ErrorBody, description = "`STORE_UNAVAILABLE`"),
    ),
    security(("bearer" = [])))]
pub async fn create_webhook(
    State(state): State<AppState>,
    principal: Principal,
    AppJson(request): AppJson<CreateWebhookRequest>,
) -> ApiResult<(StatusCode, Json<CreatedWebhook>)> {
    require_write(&principal, request.session_id.as_deref())?;
    let policy = state.runtime.egress().policy();
    let (events, secret) =
        check_request(&request.url, &request.events, policy).map_err(|error| {
            ApiError::invalid(error.to_string()).with_details(json!({ "field": error.field }))
        })?;
    let session = match request.session_id {
        Some(id) => {
            let record = crate::api::runs::load_owned_session(&state, &principal, id).await?;
            if record.status == SessionStatus::Closed {
                return Err(ApiError::new(
                    ErrorCode::SessionClosed,
                    "the session is closed",
                ));
            }
            Some(record.id)
        }
        None => None,
    };
    let created = state
        .store
        .create_webhook(
            &principal.tenant,
            NewWebhook {
                id: webhook_id(),
                session,
                url: request.url,
                events,
                secret: secret.clone(),
            },
            state.settings.webhooks.caps(),
        )
        .await
        .map_err(|error| match error {
            crate::store::StoreError::NotFound => ApiError::not_found("session"),
            other => other.into(),
        })?
        .map_err(|cap| {
            ApiError::new(ErrorCode::WebhookLimit, cap.to_string())
                .with_details(json!({ "max": cap.max }))
        })?;
    tracing::info!(tenant = %principal.tenant, webhook_id = %created.id,
        session_id = created.session_id.as_deref(), "webhook subscription created");
    Ok((
        StatusCode::CREATED,
        Json(CreatedWebhook {
            webhook: created,
            secret,
        }),
    ))
}

/// The tenant's tenant-wide subscriptions, or one session's (`session_id`), oldest first.
#[utoipa::path(get, path = "/v1/webhooks", tag = "webhooks",
    params(ListWebhooksParams),
    responses(
        (status = 200, body = WebhookList),
        (status = 401, body = ErrorBody),
        (status = 403, body = ErrorBody, description = "The token lacks `sessions:read`"),
        (status = 503, body = ErrorBody, description = "`STORE_UNAVAILABLE`"),
    ),
    security(("bearer" = [])))]
pub async fn list_webhooks(
    State(state): State<AppState>,
    principal: Principal,
    AppQuery(params): AppQuery<ListWebhooksParams>,
) -> ApiResult<Json<WebhookList>> {
    principal.require(scopes::SESSIONS_READ)?;
    let session = params.session_id.map(SessionId::from_string);
    let webhooks = state
        .store
        .list_webhooks(&principal.tenant, session.as_ref())
        .await?;
    Ok(Json(WebhookList { webhooks }))
}

async fn load_webhook(
    state: &AppState,
    principal: &Principal,
    id: &str,
) -> ApiResult<WebhookRecord> {
    state
        .store
        .get_webhook(&principal.tenant, id)
        .await?
        .ok_or_else(|| ApiError::not_found("webhook"))
}

/// One subscription (never its secret).
#[utoipa::path(get, path = "/v1/webhooks/{id}", tag = "webhooks",
    params(("id" = String, Path, description = "Subscription id (`wh_…`)")),
    responses(
        (status = 200, body = WebhookRecord),
        (status = 401, body = ErrorBody),
        (status = 403, body = ErrorBody, description = "The token lacks `sessions:read`"),
        (status = 404, body = ErrorBody),
        (status = 503, body = ErrorBody, description = "`STORE_UNAVAILABLE`"),
    ),
    security(("bearer" = [])))]
pub async fn get_webhook(
    State(state): State<AppState>,
    principal: Principal,
    Path(id): Path<String>,
) -> ApiResult<Json<WebhookRecord>> {
    principal.require(scopes::SESSIONS_READ)?;
    Ok(Json(load_webhook(&state, &principal, &id).await?))
}

/// Deletes a subscription; its deliveries (pending ones included, which are then not sent)
/// and their log go with it.
#[utoipa::path(delete, path = "/v1/webhooks/{id}", tag = "webhooks",
    params(("id" = String, Path, description = "Subscription id (`wh_…`)")),
    responses(
        (status = 204, description = "Deleted"),
        (status = 401, body = ErrorBody),
        (status = 403, body = ErrorBody, description = "`FORBIDDEN_SCOPE`: tenant-wide needs `tenant:admin`, a session's needs `sessions:write`"),
        (status = 404, body = ErrorBody),
        (status = 503, body = ErrorBody, description = "`STORE_UNAVAILABLE`"),
    ),
    security(("bearer" = [])))]
pub async fn delete_webhook(
    State(state): State<AppState>,
    principal: Principal,
    Path(id): Path<String>,
) -> ApiResult<StatusCode> {
    principal.require(scopes::SESSIONS_READ)?;
    let webhook = load_webhook(&state, &principal, &id).await?;
    require_write(&principal, webhook.session_id.as_deref())?;
    if !state.store.delete_webhook(&principal.tenant, &id).await? {
        return Err(ApiError::not_found("webhook"));
    }
    Ok(StatusCode::NO_CONTENT)
}

/// The subscription's deliveries, newest first: status, attempts and each attempt's time,
/// HTTP status or error code and duration.
#[utoipa::path(get, path = "/v1/webhooks/{id}/deliveries", tag = "webhooks",
    params(("id" = String, Path, description = "Subscription id (`wh_…`)"), DeliveriesParams),
    responses(
        (status = 200, body = DeliveryList),
        (status = 401, body = ErrorBody),
        (status = 403, body = ErrorBody, description = "The token lacks `sessions:read`"),
        (status = 404, body = ErrorBody),
        (status = 422, body = ErrorBody, description = "`INVALID_REQUEST`: `limit` outside 1..=100 or a malformed parameter"),
        (status = 503, body = ErrorBody, description = "`STORE_UNAVAILABLE`"),
    ),
    security(("bearer" = [])))]
pub async fn list_deliveries(
    State(state): State<AppState>,
    principal: Principal,
    Path(id): Path<String>,
    AppQuery(params): AppQuery<DeliveriesParams>,
) -> ApiResult<Json<DeliveryList>> {
    principal.require(scopes::SESSIONS_READ)?;
    let limit = params.limit.unwrap_or(50);
    if !(1..=MAX_DELIVERIES_PAGE).contains(&limit) {
        return Err(ApiError::invalid(format!(
            "limit must be between 1 and {MAX_DELIVERIES_PAGE}"
        )));
    }
    load_webhook(&state, &principal, &id).await?;
    let deliveries = state
        .store
        .list_webhook_deliveries(&principal.tenant, &id, params.before, limit)
        .await?;
    let next_before = deliveries
        .last()
        .filter(|_| deliveries.len() == limit as usize)
        .map(|d| d.position);
    Ok(Json(DeliveryList {
        deliveries,
        next_before,
    }))
}

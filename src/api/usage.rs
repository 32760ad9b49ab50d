//! Usage: the token's tenant's usage ledger, summed per day, session or model.

use crate::api::extract::AppQuery;
use crate::app::AppState;
use crate::auth::{Principal, scopes};
use crate::error::{ApiError, ApiResult, ErrorBody};
use crate::usage::{UsageGroup, UsageGroupBy, UsageQuery};
use axum::Json;
use axum::extract::State;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

/// The longest range one report covers.
pub const MAX_RANGE_DAYS: i64 = 366;
/// The most groups one report returns.
pub const MAX_GROUPS: u32 = 1000;
/// Groups returned when `limit` is absent.
pub const DEFAULT_GROUPS: u32 = 100;

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct UsageParams {
    /// Start of the range (RFC 3339, inclusive).
    pub from: DateTime<Utc>,
    /// End of the range (RFC 3339, exclusive); after `from`, at most 366 days later.
    pub to: DateTime<Utc>,
    /// `day` (UTC), `session` or `model` (`provider/model`).
    pub group_by: UsageGroupBy,
    /// Most groups returned, 1..=1000 (default 100), ordered by key; outside that range
    /// `422 INVALID_REQUEST`.
    #[param(minimum = 1, maximum = 1000)]
    pub limit: Option<u32>,
}

/// The tenant's usage in a range.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct UsageReport {
    pub from: DateTime<Utc>,
    pub to: DateTime<Utc>,
    pub group_by: UsageGroupBy,
    /// One entry per group with usage in the range, ordered by key.
    pub groups: Vec<UsageGroup>,
    /// True when `limit` groups were returned and more may exist (narrow the range).
    pub truncated: bool,
}

/// The token's tenant's usage ledger between `from` and `to`, summed per UTC day, per session
/// or per provider/model, with the cost from the price table. Every completed model call of
/// every run counts (resumed runs included).
#[utoipa::path(get, path = "/v1/usage", tag = "usage",
    params(UsageParams),
    responses(
        (status = 200, body = UsageReport),
        (status = 422, body = ErrorBody, description = "`INVALID_REQUEST`: a missing or malformed parameter, `to` not after `from`, a range over 366 days, `limit` outside 1..=1000"),
    ),
    security(("bearer" = [])))]
pub async fn get_usage(
    State(state): State<AppState>,
    principal: Principal,
    AppQuery(params): AppQuery<UsageParams>,
) -> ApiResult<Json<UsageReport>> {
    principal.require(scopes::SESSIONS_READ)?;
    let limit = params.limit.unwrap_or(DEFAULT_GROUPS);
    if !(1..=MAX_GROUPS).contains(&limit) {
        return Err(ApiError::invalid(format!(
            "limit must be between 1 and {MAX_GROUPS}"
        )));
    }
    if params.to <= params.from {
        return Err(ApiError::invalid("to must be after from"));
    }
    if params.to - params.from > chrono::Duration::days(MAX_RANGE_DAYS) {
        return Err(ApiError::invalid(format!(
            "the range may cover at most {MAX_RANGE_DAYS} days"
        )));
    }
    let groups = state
        .store
        .usage_report(
            &principal.tenant,
            &UsageQuery {
                from: params.from,
                to: params.to,
                group_by: params.group_by,
                limit,
            },
        )
        .await?;
    Ok(Json(UsageReport {
        from: params.from,
        to: params.to,
        group_by: params.group_by,
        truncated: groups.len() == limit as usize,
        groups,
    }))
}

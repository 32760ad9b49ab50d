//! The operator API: what the platform team running the server does to tenants, with the
//! target tenant in the path. Today: read, set and reset a tenant's spend budget, with what it
//! spent in the current UTC day and month.
//!
//! It is authenticated by the operator credential (`operator.token_sha256`: the SHA-256 of a
//! bearer token the operator holds), never by a tenant's JWT, so no tenant can raise its own
//! limits. The presented token is hashed and compared with the configured digest in constant
//! time. Without `operator.token_sha256` the operator API does not exist: every route under
//! `/v1/operator` answers `404 NOT_FOUND`, as an unknown route does. A missing, malformed or
//! wrong token (a tenant JWT included) answers `401 UNAUTHENTICATED`.

use crate::api::extract::AppJson;
use crate::app::AppState;
use crate::budgets::{Budget, BudgetSource, Period, Spend, TenantSpend};
use crate::error::{ApiError, ApiResult, ErrorBody, ErrorCode};
use crate::ids::TenantId;
use axum::Json;
use axum::extract::{FromRequestParts, Path, State};
use axum::http::header::AUTHORIZATION;
use axum::http::request::Parts;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;
use utoipa::ToSchema;

/// The operator credential settings (`[operator]`, `NORMA_OPERATOR__*`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct OperatorSettings {
    /// Lowercase or uppercase hex SHA-256 of the operator's bearer token (64 characters), e.g.
    /// `printf %s "$TOKEN" | sha256sum`. Absent: no operator API (its routes answer 404).
    pub token_sha256: Option<String>,
}

impl OperatorSettings {
    /// Checks the digest is 64 hex characters.
    pub fn validate(&self) -> Result<(), String> {
        match &self.token_sha256 {
            Some(digest) if self.digest().is_none() => Err(format!(
                "operator.token_sha256 must be 64 hex characters (the SHA-256 of the operator \
                 token), got {} characters",
                digest.len()
            )),
            _ => Ok(()),
        }
    }

    fn digest(&self) -> Option<[u8; 32]> {
        let bytes = hex::decode(self.token_sha256.as_deref()?.trim()).ok()?;
        bytes.try_into().ok()
    }
}

/// A request authenticated by the operator credential.
pub struct Operator;

impl FromRequestParts<AppState> for Operator {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        let Some(expected) = state.settings.operator.digest() else {
            return Err(ApiError::new(ErrorCode::NotFound, "no such route"));
        };
        let unauthenticated = || {
            ApiError::new(
                ErrorCode::Unauthenticated,
                "a valid operator token is required",
            )
        };
        let header = parts
            .headers
            .get(AUTHORIZATION)
            .and_then(|value| value.to_str().ok())
            .ok_or_else(unauthenticated)?;
        let token = header
            .strip_prefix("Bearer ")
            .or_else(|| header.strip_prefix("bearer "))
            .ok_or_else(unauthenticated)?
            .trim();
        let presented: [u8; 32] = Sha256::digest(token.as_bytes()).into();
        if bool::from(presented[..].ct_eq(&expected[..])) {
            Ok(Operator)
        } else {
            tracing::warn!("operator API: wrong operator token");
            Err(unauthenticated())
        }
    }
}

/// What a tenant spent in one UTC period.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct PeriodSpend {
    /// `YYYY-MM-DD` (day) or `YYYY-MM` (month), UTC.
    pub period: String,
    pub starts_at: DateTime<Utc>,
    /// When this period's spend starts again from zero.
    pub resets_at: DateTime<Utc>,
    /// Tokens of every kind (uncached input, output, cache reads and writes).
    pub tokens: u64,
    /// Cost of the priced calls in micro-units, rounded half up.
    pub cost_micros: u64,
}

impl PeriodSpend {
    fn new(period: Period, spend: Spend, now: DateTime<Utc>) -> Self {
        Self {
            period: period.key(now),
            starts_at: period.start(now),
            resets_at: period.end(now),
            tokens: spend.tokens,
            cost_micros: spend.cost_micros(),
        }
    }
}

/// The tenant's spend in the current UTC day and month.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct SpendView {
    pub day: PeriodSpend,
    pub month: PeriodSpend,
}

/// A tenant's budget in force, where it comes from, and what the tenant spent.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct TenantBudgetView {
    pub tenant: String,
    /// The budget in force (an absent value: no limit).
    pub budget: Budget,
    /// `operator` when set through this API, `default` for `[limits.budget]`.
    pub source: BudgetSource,
    /// The configured default (`[limits.budget]`), in force after a `DELETE`.
    pub default: Budget,
    pub spend: SpendView,
    /// The `details` a prompt of the tenant would get with `429 BUDGET_EXCEEDED` now, or null.
    #[schema(value_type = Option<Object>)]
    pub exceeded: Option<serde_json::Value>,
}

fn target(tenant: String) -> ApiResult<TenantId> {
    if !crate::ids::TenantId::is_well_formed(&tenant) {
        return Err(ApiError::invalid(
            "tenant must be 1 to 128 characters of letters, digits and - _ . : @",
        )
        .with_details(serde_json::json!({ "field": "tenant" })));
    }
    tracing::Span::current().record("tenant", tenant.as_str());
    Ok(TenantId::new(tenant))
}

async fn view(state: &AppState, tenant: &TenantId) -> ApiResult<TenantBudgetView> {
    let gate = state.runtime.budgets();
    let (budget, source) = gate.effective(tenant).await?;
    let now = Utc::now();
    let spend: TenantSpend = gate.spend(tenant, now).await?;
    Ok(TenantBudgetView {
        tenant: tenant.to_string(),
        exceeded: budget
            .check(&spend, now)
            .err()
            .map(|exceeded| exceeded.details()),
        budget,
        source,
        default: state.settings.limits.budget,
        spend: SpendView {
            day: PeriodSpend::new(Period::Day, spend.day, now),
            month: PeriodSpend::new(Period::Month, spend.month, now),
        },
    })
}

/// A tenant's spend budget and what it spent in the current UTC day and month.
#[utoipa::path(get, path = "/v1/operator/tenants/{tenant}/budgets", tag = "operator",
    params(("tenant" = String, Path, description = "Tenant id (1..=128 of letters, digits, - _ . : @)")),
    responses(
        (status = 200, body = TenantBudgetView),
        (status = 422, body = ErrorBody, description = "`INVALID_REQUEST`: a malformed tenant id"),
    ),
    security(("operator" = [])))]
pub async fn get_budget(
    _operator: Operator,
    State(state): State<AppState>,
    Path(tenant): Path<String>,
) -> ApiResult<Json<TenantBudgetView>> {
    let tenant = target(tenant)?;
    Ok(Json(view(&state, &tenant).await?))
}

/// Sets a tenant's spend budget, replacing the configured default for it (every value
/// optional: an absent one is no limit). In force at the next check of every replica.
#[utoipa::path(put, path = "/v1/operator/tenants/{tenant}/budgets", tag = "operator",
    params(("tenant" = String, Path, description = "Tenant id (1..=128 of letters, digits, - _ . : @)")),
    request_body = Budget,
    responses(
        (status = 200, body = TenantBudgetView),
        (status = 422, body = ErrorBody, description = "`INVALID_REQUEST`: a malformed tenant id, an unknown field, a value that is not an integer in 0..=10^15"),
    ),
    security(("operator" = [])))]
pub async fn put_budget(
    _operator: Operator,
    State(state): State<AppState>,
    Path(tenant): Path<String>,
    AppJson(body): AppJson<serde_json::Map<String, serde_json::Value>>,
) -> ApiResult<Json<TenantBudgetView>> {
    let tenant = target(tenant)?;
    // An object only (a struct would also take a JSON array), with the field named on error.
    let budget: Budget = serde_path_to_error::deserialize(serde_json::Value::Object(body))
        .map_err(|error| {
            let field = error.path().to_string();
            ApiError::invalid(format!("invalid budget: {field}: {}", error.inner()))
                .with_details(serde_json::json!({ "field": field }))
        })?;
    budget.validate().map_err(|invalid| {
        ApiError::invalid(invalid.to_string())
            .with_details(serde_json::json!({ "field": invalid.field, "max": invalid.max }))
    })?;
    state
        .store
        .set_tenant_budget(&tenant, Some(&budget))
        .await?;
    tracing::info!(?budget, "operator set a tenant budget");
    Ok(Json(view(&state, &tenant).await?))
}

/// Removes the budget set for a tenant: the configured default (`[limits.budget]`) is in
/// force again.
#[utoipa::path(delete, path = "/v1/operator/tenants/{tenant}/budgets", tag = "operator",
    params(("tenant" = String, Path, description = "Tenant id (1..=128 of letters, digits, - _ . : @)")),
    responses(
        (status = 200, body = TenantBudgetView),
        (status = 422, body = ErrorBody, description = "`INVALID_REQUEST`: a malformed tenant id"),
    ),
    security(("operator" = [])))]
pub async fn delete_budget(
    _operator: Operator,
    State(state): State<AppState>,
    Path(tenant): Path<String>,
) -> ApiResult<Json<TenantBudgetView>> {
    let tenant = target(tenant)?;
    state.store.set_tenant_budget(&tenant, None).await?;
    tracing::info!("operator reset a tenant budget to the default");
    Ok(Json(view(&state, &tenant).await?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_digest_must_be_64_hex_characters() {
        let settings = |digest: &str| OperatorSettings {
            token_sha256: Some(digest.into()),
        };
        assert!(OperatorSettings::default().validate().is_ok());
        assert!(settings(&"ab".repeat(32)).validate().is_ok());
        assert!(settings("abc").validate().is_err());
        assert!(settings(&"zz".repeat(32)).validate().is_err());
    }
}

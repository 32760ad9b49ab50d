//! The HTTP error surface: one code enum, one error type, mapped to responses once.
//!
//! Every non-2xx body is `{"code": "UPPER_SNAKE", "message": "…", "details": {…}?}`. Clients
//! branch on `code` only; `message` is for people. 5xx answers never leak internals: the real
//! error is logged, the client gets a generic message.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use serde_json::Value;
use utoipa::ToSchema;

use crate::store::StoreError;

/// Stable machine-readable error codes of the HTTP API.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, ToSchema)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum ErrorCode {
    /// No or malformed `Authorization` header, bad signature, disallowed algorithm, garbage token.
    Unauthenticated,
    TokenExpired,
    TokenNotYetValid,
    TokenInvalidAudience,
    TokenInvalidIssuer,
    TokenMissingTenant,
    TokenUnknownKey,
    /// A stream ticket (`?ticket=`) that is malformed, tampered with or signed by another key.
    TicketInvalid,
    /// A stream ticket past its expiry: ask for a new one.
    TicketExpired,
    /// A stream ticket issued for another session.
    TicketWrongSession,
    /// The token is valid but lacks the scope the route needs.
    ForbiddenScope,
    /// Missing, or owned by another tenant (indistinguishable on purpose).
    NotFound,
    MethodNotAllowed,
    /// Well-formed JSON that does not satisfy the request schema.
    InvalidRequest,
    /// The body is not JSON at all.
    InvalidJson,
    UnsupportedMediaType,
    PayloadTooLarge,
    /// The request conflicts with the object's state.
    Conflict,
    /// The session is running another prompt and the client chose `reject`.
    SessionBusy,
    /// The session is closed.
    SessionClosed,
    /// The approval was already answered (or settled by expiry or cancel).
    ApprovalAlreadyDecided,
    /// The approval request expired before the answer arrived.
    ApprovalExpired,
    /// A prompt arrived while the session's run waits on an approval, and the session's
    /// `approvals.on_new_prompt` is `reject`.
    ApprovalPending,
    /// A hook refused the request (e.g. a UserPromptSubmit hook).
    HookBlocked,
    /// A per-tenant limit (open sessions, concurrent runs) is reached.
    TenantLimit,
    /// The tenant (or the session) already has as many webhook subscriptions as allowed.
    WebhookLimit,
    /// One of the tenant's spend budgets (tokens or cost per UTC day or month) is spent;
    /// `details.resets_at` and `Retry-After` say when it resets.
    BudgetExceeded,
    /// The tenant has a cost budget and the session's model has no price in the price table.
    ModelNotPriced,
    /// An `Idempotency-Key` already used for a different request (another body, or another
    /// session for prompts): the key names the first request's outcome only.
    IdempotencyKeyReused,
    /// A concurrent request with the same `Idempotency-Key` is being answered; retry.
    IdempotencyKeyInUse,
    StoreUnavailable,
    /// This replica is shutting down and takes no new work; retry on another replica.
    ShuttingDown,
    Internal,
}

impl ErrorCode {
    pub fn status(self) -> StatusCode {
        match self {
            Self::Unauthenticated
            | Self::TokenExpired
            | Self::TokenNotYetValid
            | Self::TokenInvalidAudience
            | Self::TokenInvalidIssuer
            | Self::TokenMissingTenant
            | Self::TokenUnknownKey
            | Self::TicketInvalid
            | Self::TicketExpired
            | Self::TicketWrongSession => StatusCode::UNAUTHORIZED,
            Self::ForbiddenScope => StatusCode::FORBIDDEN,
            Self::NotFound => StatusCode::NOT_FOUND,
            Self::MethodNotAllowed => StatusCode::METHOD_NOT_ALLOWED,
            Self::InvalidRequest => StatusCode::UNPROCESSABLE_ENTITY,
            Self::InvalidJson => StatusCode::BAD_REQUEST,
            Self::UnsupportedMediaType => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            Self::PayloadTooLarge => StatusCode::PAYLOAD_TOO_LARGE,
            Self::TenantLimit | Self::BudgetExceeded => StatusCode::TOO_MANY_REQUESTS,
            Self::HookBlocked
            | Self::IdempotencyKeyReused
            | Self::WebhookLimit
            | Self::ModelNotPriced => StatusCode::UNPROCESSABLE_ENTITY,
            Self::IdempotencyKeyInUse => StatusCode::CONFLICT,
            Self::Conflict
            | Self::SessionBusy
            | Self::SessionClosed
            | Self::ApprovalAlreadyDecided
            | Self::ApprovalExpired
            | Self::ApprovalPending => StatusCode::CONFLICT,
            Self::StoreUnavailable | Self::ShuttingDown => StatusCode::SERVICE_UNAVAILABLE,
            Self::Internal => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Unauthenticated => "UNAUTHENTICATED",
            Self::TokenExpired => "TOKEN_EXPIRED",
            Self::TokenNotYetValid => "TOKEN_NOT_YET_VALID",
            Self::TokenInvalidAudience => "TOKEN_INVALID_AUDIENCE",
            Self::TokenInvalidIssuer => "TOKEN_INVALID_ISSUER",
            Self::TokenMissingTenant => "TOKEN_MISSING_TENANT",
            Self::TokenUnknownKey => "TOKEN_UNKNOWN_KEY",
            Self::TicketInvalid => "TICKET_INVALID",
            Self::TicketExpired => "TICKET_EXPIRED",
            Self::TicketWrongSession => "TICKET_WRONG_SESSION",
            Self::ForbiddenScope => "FORBIDDEN_SCOPE",
            Self::NotFound => "NOT_FOUND",
            Self::MethodNotAllowed => "METHOD_NOT_ALLOWED",
            Self::InvalidRequest => "INVALID_REQUEST",
            Self::InvalidJson => "INVALID_JSON",
            Self::UnsupportedMediaType => "UNSUPPORTED_MEDIA_TYPE",
            Self::PayloadTooLarge => "PAYLOAD_TOO_LARGE",
            Self::Conflict => "CONFLICT",
            Self::SessionBusy => "SESSION_BUSY",
            Self::SessionClosed => "SESSION_CLOSED",
            Self::ApprovalAlreadyDecided => "APPROVAL_ALREADY_DECIDED",
            Self::ApprovalExpired => "APPROVAL_EXPIRED",
            Self::ApprovalPending => "APPROVAL_PENDING",
            Self::TenantLimit => "TENANT_LIMIT",
            Self::BudgetExceeded => "BUDGET_EXCEEDED",
            Self::ModelNotPriced => "MODEL_NOT_PRICED",
            Self::HookBlocked => "HOOK_BLOCKED",
            Self::WebhookLimit => "WEBHOOK_LIMIT",
            Self::IdempotencyKeyReused => "IDEMPOTENCY_KEY_REUSED",
            Self::IdempotencyKeyInUse => "IDEMPOTENCY_KEY_IN_USE",
            Self::StoreUnavailable => "STORE_UNAVAILABLE",
            Self::ShuttingDown => "SHUTTING_DOWN",
            Self::Internal => "INTERNAL",
        }
    }
}

/// The body of every error response.
#[derive(Debug, Serialize, ToSchema)]
pub struct ErrorBody {
    pub code: ErrorCode,
    pub message: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub details: Option<Value>,
}

/// An error answered to an HTTP client.
#[derive(Debug, thiserror::Error)]
#[error("{code:?}: {message}")]
pub struct ApiError {
    pub code: ErrorCode,
    pub message: String,
    pub details: Option<Value>,
    /// Seconds for the `Retry-After` header (a 503 always has one).
    pub retry_after: Option<u64>,
}

impl ApiError {
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
            details: None,
            retry_after: None,
        }
    }

    pub fn with_details(mut self, details: Value) -> Self {
        self.details = Some(details);
        self
    }

    pub fn not_found(what: &str) -> Self {
        Self::new(ErrorCode::NotFound, format!("{what} not found"))
    }

    pub fn invalid(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::InvalidRequest, message)
    }
}

impl From<crate::limits::LimitExceeded> for ApiError {
    fn from(exceeded: crate::limits::LimitExceeded) -> Self {
        Self::new(ErrorCode::TenantLimit, exceeded.to_string()).with_details(exceeded.details())
    }
}

impl From<crate::budgets::BudgetExceeded> for ApiError {
    fn from(exceeded: crate::budgets::BudgetExceeded) -> Self {
        let mut error = Self::new(ErrorCode::BudgetExceeded, exceeded.to_string())
            .with_details(exceeded.details());
        error.retry_after = Some(exceeded.retry_after_seconds(chrono::Utc::now()));
        error
    }
}

impl From<crate::store::InvalidCursor> for ApiError {
    fn from(error: crate::store::InvalidCursor) -> Self {
        ApiError::new(ErrorCode::InvalidRequest, error.to_string())
    }
}

impl From<StoreError> for ApiError {
    fn from(error: StoreError) -> Self {
        match error {
            StoreError::Unavailable(reason) => {
                tracing::warn!(%reason, "store unavailable");
                Self::new(
                    ErrorCode::StoreUnavailable,
                    "the store is unavailable; retry later",
                )
            }
            StoreError::NotFound => Self::not_found("resource"),
            StoreError::Conflict(message) => Self::new(ErrorCode::Conflict, message),
            StoreError::LeaseLost => Self::new(
                ErrorCode::Conflict,
                "the run's lease was lost to another claim",
            ),
            StoreError::TenantLimit(exceeded) => exceeded.into(),
            StoreError::IdempotencyKeyTaken => Self::new(
                ErrorCode::IdempotencyKeyInUse,
                "a concurrent request with this Idempotency-Key is being answered; retry",
            ),
            StoreError::Internal(reason) => {
                tracing::error!(%reason, "store error");
                Self::new(ErrorCode::Internal, "internal error")
            }
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = ErrorBody {
            code: self.code,
            message: self.message,
            details: self.details,
        };
        let status = self.code.status();
        let mut response = (status, axum::Json(body)).into_response();
        if let Some(seconds) = self.retry_after {
            response.headers_mut().insert(
                axum::http::header::RETRY_AFTER,
                axum::http::HeaderValue::from(seconds),
            );
        } else if status == StatusCode::SERVICE_UNAVAILABLE {
            // Every 503 says when to come back (the store or the replica is expected back).
            response.headers_mut().insert(
                axum::http::header::RETRY_AFTER,
                axum::http::HeaderValue::from_static(RETRY_AFTER_SECONDS),
            );
        }
        if status == StatusCode::PAYLOAD_TOO_LARGE {
            // The rest of the body is never read, so the connection cannot carry another
            // request: say so, or a pooling client reuses it and sees a reset.
            response.headers_mut().insert(
                axum::http::header::CONNECTION,
                axum::http::HeaderValue::from_static("close"),
            );
        }
        response
    }
}

/// The `Retry-After` of every 503 answer, in seconds.
pub const RETRY_AFTER_SECONDS: &str = "2";

pub type ApiResult<T> = Result<T, ApiError>;

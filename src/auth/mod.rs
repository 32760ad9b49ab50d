//! Authentication and tenancy: bearer JWTs verified with pinned algorithms; the tenant comes
//! only from a verified claim.

pub mod jwt;
mod verified;

use crate::error::{ApiError, ErrorCode};
use crate::ids::TenantId;
use axum::extract::FromRequestParts;
use axum::http::header::AUTHORIZATION;
use axum::http::request::Parts;
use std::sync::Arc;

pub use jwt::{AuthError, JwtVerifier, TokenRequest};

/// Scopes that routes require.
pub mod scopes {
    pub const SESSIONS_READ: &str = "sessions:read";
    pub const SESSIONS_WRITE: &str = "sessions:write";
    pub const APPROVALS_WRITE: &str = "approvals:write";
    /// A tenant's own administrator: may mark MCP servers `trusted`.
    pub const TENANT_ADMIN: &str = "tenant:admin";
    /// Every scope a development token carries.
    pub const ALL: [&str; 3] = [SESSIONS_READ, SESSIONS_WRITE, APPROVALS_WRITE];
}

/// The verified caller of a request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Principal {
    pub tenant: TenantId,
    /// The token's `sub` (who acts), kept for audit records.
    pub subject: String,
    pub scopes: Vec<String>,
}

impl Principal {
    /// Fails with `FORBIDDEN_SCOPE` unless the token carries `scope`.
    /// `sessions:write` implies `sessions:read`.
    pub fn require(&self, scope: &str) -> Result<(), ApiError> {
        let granted = self
            .scopes
            .iter()
            .any(|s| s == scope || (scope == scopes::SESSIONS_READ && s == scopes::SESSIONS_WRITE));
        if granted {
            Ok(())
        } else {
            Err(ApiError::new(
                ErrorCode::ForbiddenScope,
                format!("this route needs the `{scope}` scope"),
            ))
        }
    }
}

/// State that can verify tokens.
pub trait HasVerifier {
    fn verifier(&self) -> &Arc<JwtVerifier>;
}

impl<S> FromRequestParts<S> for Principal
where
    S: HasVerifier + Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        let header = parts
            .headers
            .get(AUTHORIZATION)
            .ok_or_else(|| {
                ApiError::new(ErrorCode::Unauthenticated, "missing Authorization header")
            })?
            .to_str()
            .map_err(|_| {
                ApiError::new(ErrorCode::Unauthenticated, "malformed Authorization header")
            })?;
        let token = header
            .strip_prefix("Bearer ")
            .or_else(|| header.strip_prefix("bearer "))
            .ok_or_else(|| {
                ApiError::new(
                    ErrorCode::Unauthenticated,
                    "expected `Authorization: Bearer <token>`",
                )
            })?;
        let principal = state.verifier().verify(token.trim())?;
        tracing::Span::current().record("tenant", principal.tenant.as_str());
        Ok(principal)
    }
}

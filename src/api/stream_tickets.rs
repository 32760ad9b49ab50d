//! Stream tickets: how a browser `EventSource` (which cannot send `Authorization`) follows a
//! session's stream without a long-lived token in a URL.
//!
//! `POST /v1/sessions/{id}/stream-tickets` (bearer, `sessions:read`) answers a ticket bound to
//! the caller's tenant, the session and the read scope, valid for
//! `browser.stream_ticket_ttl_seconds`. It is signed (HMAC-SHA256 with the server's ticket
//! key), never stored: any replica sharing `browser.stream_ticket_secret` accepts it. It is
//! accepted as `?ticket=` on `GET /v1/sessions/{id}/stream` only, and any number of times
//! until it expires, because an `EventSource` reconnects to the same URL (with
//! `Last-Event-ID`). Tickets are never logged (request spans record the route, not the URI).
//!
//! Form: `nst1.<base64url(JSON claims)>.<base64url(HMAC of "nst1.<claims>")>`.

use crate::api::runs::load_owned_session;
use crate::app::AppState;
use crate::auth::{Principal, scopes};
use crate::error::{ApiError, ApiResult, ErrorCode};
use crate::ids::TenantId;
use axum::Json;
use axum::extract::{FromRequestParts, Path, State};
use axum::http::request::Parts;
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64;
use hmac::{Hmac, Mac};
use secrecy::ExposeSecret;
use serde::{Deserialize, Serialize};
use sha2::Sha256;
use utoipa::ToSchema;

type HmacSha256 = Hmac<Sha256>;

const PREFIX: &str = "nst1.";
/// Longest ticket text looked at; a longer one is refused before any decoding.
pub const MAX_TICKET_CHARS: usize = 2048;

/// Why a ticket was refused (each maps to its own `401` code).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum TicketError {
    #[error("the stream ticket is malformed or its signature does not match")]
    Invalid,
    #[error("the stream ticket has expired; ask for a new one")]
    Expired,
    #[error("the stream ticket was issued for another session")]
    WrongSession,
}

impl From<TicketError> for ApiError {
    fn from(error: TicketError) -> Self {
        let code = match error {
            TicketError::Invalid => ErrorCode::TicketInvalid,
            TicketError::Expired => ErrorCode::TicketExpired,
            TicketError::WrongSession => ErrorCode::TicketWrongSession,
        };
        ApiError::new(code, error.to_string())
    }
}

/// What a ticket says.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Claims {
    /// Tenant.
    t: String,
    /// Session id.
    s: String,
    /// The token subject that asked for it (audit).
    u: String,
    /// Scope granted: always `sessions:read`.
    sc: String,
    /// Expiry, Unix seconds.
    exp: i64,
}

/// The ticket key and lifetime of this server. `Debug` never prints the key.
pub struct TicketKey {
    key: Vec<u8>,
    ttl_seconds: u64,
}

impl std::fmt::Debug for TicketKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TicketKey")
            .field("ttl_seconds", &self.ttl_seconds)
            .finish_non_exhaustive()
    }
}

impl TicketKey {
    /// The configured key, or a random one for this process.
    pub fn from_settings(settings: &crate::api::cors::BrowserSettings) -> Self {
        let key = match &settings.stream_ticket_secret {
            Some(secret) => secret.expose_secret().as_bytes().to_vec(),
            None => {
                use rand::RngCore;
                let mut key = vec![0u8; 32];
                rand::thread_rng().fill_bytes(&mut key);
                key
            }
        };
        Self {
            key,
            ttl_seconds: settings.stream_ticket_ttl_seconds,
        }
    }

    fn mac(&self, signed: &str) -> HmacSha256 {
        let mut mac = HmacSha256::new_from_slice(&self.key).expect("HMAC takes any key length");
        mac.update(signed.as_bytes());
        mac
    }

    /// A ticket for `principal` on `session`, valid from `now` (Unix seconds) for the TTL.
    fn issue(&self, principal: &Principal, session: &str, now: i64) -> (String, i64) {
        let exp = now + self.ttl_seconds as i64;
        let claims = Claims {
            t: principal.tenant.as_str().to_owned(),
            s: session.to_owned(),
            u: principal.subject.clone(),
            sc: scopes::SESSIONS_READ.to_owned(),
            exp,
        };
        let body = B64.encode(serde_json::to_vec(&claims).unwrap_or_default());
        let signed = format!("{PREFIX}{body}");
        let signature = B64.encode(self.mac(&signed).finalize().into_bytes());
        (format!("{signed}.{signature}"), exp)
    }

    /// The read-only caller a ticket stands for, on `session` at `now`.
    fn verify(&self, ticket: &str, session: &str, now: i64) -> Result<Principal, TicketError> {
        if ticket.len() > MAX_TICKET_CHARS {
            return Err(TicketError::Invalid);
        }
        let (signed, signature) = ticket.rsplit_once('.').ok_or(TicketError::Invalid)?;
        let body = signed.strip_prefix(PREFIX).ok_or(TicketError::Invalid)?;
        let signature = B64.decode(signature).map_err(|_| TicketError::Invalid)?;
        self.mac(signed)
            .verify_slice(&signature)
            .map_err(|_| TicketError::Invalid)?;
        let claims: Claims = B64
            .decode(body)
            .ok()
            .and_then(|json| serde_json::from_slice(&json).ok())
            .ok_or(TicketError::Invalid)?;
        if claims.sc != scopes::SESSIONS_READ {
            return Err(TicketError::Invalid);
        }
        if now >= claims.exp {
            return Err(TicketError::Expired);
        }
        if claims.s != session {
            return Err(TicketError::WrongSession);
        }
        Ok(Principal {
            tenant: TenantId::new(claims.t),
            subject: claims.u,
            scopes: vec![scopes::SESSIONS_READ.to_owned()],
        })
    }
}

fn now_seconds() -> i64 {
    chrono::Utc::now().timestamp()
}

/// The caller of `GET …/stream`: a bearer token, or a `?ticket=` (checked against the session
/// by [`StreamCaller::for_session`]).
pub enum StreamCaller {
    Bearer(Principal),
    Ticket(String),
}

impl StreamCaller {
    /// The principal allowed to read `session`'s stream.
    pub fn for_session(self, state: &AppState, session: &str) -> ApiResult<Principal> {
        match self {
            Self::Bearer(principal) => Ok(principal),
            Self::Ticket(ticket) => {
                let principal = state.tickets.verify(&ticket, session, now_seconds())?;
                tracing::Span::current().record("tenant", principal.tenant.as_str());
                Ok(principal)
            }
        }
    }
}

impl FromRequestParts<AppState> for StreamCaller {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        let ticket = parts.uri.query().and_then(|query| {
            url::form_urlencoded::parse(query.as_bytes())
                .find(|(name, _)| name == "ticket")
                .map(|(_, value)| value.into_owned())
        });
        match ticket {
            Some(ticket) => Ok(Self::Ticket(ticket)),
            None => Principal::from_request_parts(parts, state)
                .await
                .map(Self::Bearer),
        }
    }
}

/// A stream ticket.
#[derive(Debug, Serialize, ToSchema)]
pub struct StreamTicket {
    /// Pass as `?ticket=` on `GET /v1/sessions/{id}/stream` (URL-safe; reusable until
    /// `expires_at`; read-only; this session only).
    pub ticket: String,
    /// RFC 3339 expiry.
    pub expires_at: chrono::DateTime<chrono::Utc>,
    /// The stream URL path with the ticket, ready for `new EventSource(base + stream_path)`.
    pub stream_path: String,
}

/// Issues a short-lived ticket that lets a browser `EventSource` follow this session's stream
/// without an `Authorization` header (`?ticket=` on `GET …/stream` only).
#[utoipa::path(post, path = "/v1/sessions/{id}/stream-tickets", tag = "events",
    params(("id" = String, Path, description = "Session id")),
    responses((status = 200, body = StreamTicket)),
    security(("bearer" = [])))]
pub async fn issue_ticket(
    State(state): State<AppState>,
    principal: Principal,
    Path(id): Path<String>,
) -> ApiResult<Json<StreamTicket>> {
    principal.require(scopes::SESSIONS_READ)?;
    let session = load_owned_session(&state, &principal, id).await?;
    let (ticket, exp) = state
        .tickets
        .issue(&principal, session.id.as_str(), now_seconds());
    let expires_at = chrono::DateTime::from_timestamp(exp, 0).unwrap_or_default();
    let stream_path = format!(
        "/v1/sessions/{}/stream?ticket={ticket}",
        session.id.as_str()
    );
    Ok(Json(StreamTicket {
        ticket,
        expires_at,
        stream_path,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::cors::BrowserSettings;

    fn key(secret: &str) -> TicketKey {
        TicketKey::from_settings(&BrowserSettings {
            stream_ticket_secret: Some(secret.into()),
            stream_ticket_ttl_seconds: 60,
            ..BrowserSettings::default()
        })
    }

    fn principal() -> Principal {
        Principal {
            tenant: TenantId::new("acme".to_owned()),
            subject: "alice".into(),
            scopes: vec![scopes::SESSIONS_WRITE.into()],
        }
    }

    const SECRET: &str = "0123456789abcdef0123456789abcdef";

    #[test]
    fn a_ticket_is_read_only_bound_and_reusable_until_expiry() {
        let key = key(SECRET);
        let (ticket, exp) = key.issue(&principal(), "s1", 1000);
        assert_eq!(exp, 1060);
        assert!(!ticket.contains(['+', '/', '=', '&', '?']), "{ticket}");
        for now in [1000, 1030, 1059] {
            let caller = key.verify(&ticket, "s1", now).unwrap();
            assert_eq!(caller.tenant.as_str(), "acme");
            assert_eq!(caller.scopes, vec![scopes::SESSIONS_READ.to_owned()]);
        }
        assert_eq!(key.verify(&ticket, "s1", 1060), Err(TicketError::Expired));
        assert_eq!(
            key.verify(&ticket, "s2", 1000),
            Err(TicketError::WrongSession)
        );
        // Another replica with the same key accepts it; one with another key does not.
        assert!(self::key(SECRET).verify(&ticket, "s1", 1000).is_ok());
        assert_eq!(
            self::key("another-key-another-key-another-key")
                .verify(&ticket, "s1", 1000)
                .unwrap_err(),
            TicketError::Invalid
        );
    }

    #[test]
    fn tampered_or_garbage_tickets_are_invalid() {
        let key = key(SECRET);
        let (ticket, _) = key.issue(&principal(), "s1", 1000);
        let (signed, signature) = ticket.rsplit_once('.').unwrap();
        // Claims rewritten to another tenant, signature kept.
        let forged = B64.encode(
            serde_json::to_vec(&Claims {
                t: "victim".into(),
                s: "s1".into(),
                u: "x".into(),
                sc: scopes::SESSIONS_READ.into(),
                exp: 1060,
            })
            .unwrap(),
        );
        let long = "a".repeat(MAX_TICKET_CHARS + 1);
        let cases = [
            format!("{PREFIX}{forged}.{signature}"),
            format!("{signed}.{}", B64.encode([0u8; 32])),
            format!("{signed}x.{signature}"),
            signed.to_owned(),
            String::new(),
            "nst1..".into(),
            "garbage".into(),
            long,
        ];
        for bad in cases {
            assert_eq!(
                key.verify(&bad, "s1", 1000),
                Err(TicketError::Invalid),
                "{bad}"
            );
        }
    }
}

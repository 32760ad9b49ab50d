//! The tenant's MCP server registry: `/v1/mcp-servers` (see `crate::mcp::registry`).
//! Writing needs the `tenant:admin` scope; reading needs `sessions:read` (or `tenant:admin`).
//! Secrets (environment values, header values, the bearer token) are never returned.

use crate::api::extract::AppJson;
use crate::app::AppState;
use crate::auth::{Principal, scopes};
use crate::error::{ApiError, ApiResult, ErrorBody, ErrorCode};
use crate::mcp::McpServerConfig;
use crate::mcp::registry::{self, BadRecord, RegisteredMcpServer, RegisteredMcpServers};
use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

/// An entry larger than this (as JSON) is refused.
pub const MAX_ENTRY_BYTES: usize = 64 * 1024;

impl From<BadRecord> for ApiError {
    fn from(_: BadRecord) -> Self {
        ApiError::new(ErrorCode::Internal, "internal error")
    }
}

fn invalid(field: &str, message: impl std::fmt::Display) -> ApiError {
    ApiError::invalid(format!("invalid MCP server: {field}: {message}"))
        .with_details(json!({ "field": field }))
}

/// Parses and checks an entry: every field's checks, the entry's size, and an IP-literal
/// `url` against the egress address policy (a host name is checked when it is resolved).
fn parse_entry(body: Value) -> ApiResult<McpServerConfig> {
    if !body.is_object() {
        return Err(invalid("(root)", "must be a JSON object"));
    }
    let size = serde_json::to_vec(&body).map_or(usize::MAX, |bytes| bytes.len());
    if size > MAX_ENTRY_BYTES {
        return Err(invalid(
            "(root)",
            format!("at most {MAX_ENTRY_BYTES} bytes as JSON"),
        ));
    }
    let entry: McpServerConfig = serde_path_to_error::deserialize(body).map_err(|error| {
        let path = error.path().to_string();
        let field = if path == "." || path.is_empty() {
            "(root)".to_owned()
        } else {
            path
        };
        invalid(&field, error.into_inner())
    })?;
    Ok(entry)
}

fn check_entry(state: &AppState, entry: &McpServerConfig) -> ApiResult<()> {
    entry
        .validate()
        .map_err(|(field, message)| invalid(&field, message))?;
    if let Some(url) = entry.url.as_deref().and_then(|u| url::Url::parse(u).ok()) {
        let literal = match url.host() {
            Some(url::Host::Ipv4(ip)) => Some(std::net::IpAddr::V4(ip)),
            Some(url::Host::Ipv6(ip)) => Some(std::net::IpAddr::V6(ip)),
            _ => None,
        };
        let policy = state
            .settings
            .egress
            .address_policy(state.settings.allow_private_webhooks);
        if let Some(ip) = literal
            && policy.check(ip).is_err()
        {
            return Err(invalid(
                "url",
                "the egress policy refuses this address (it is not public)",
            ));
        }
    }
    Ok(())
}

fn stored(entry: &McpServerConfig) -> ApiResult<Value> {
    serde_json::to_value(entry).map_err(|error| {
        tracing::error!(%error, "cannot serialize an MCP server entry");
        ApiError::new(ErrorCode::Internal, "internal error")
    })
}

fn require_read(principal: &Principal) -> ApiResult<()> {
    principal
        .require(scopes::SESSIONS_READ)
        .or_else(|_| principal.require(scopes::TENANT_ADMIN))
}

/// Registers an MCP server for the tenant's sessions (they use it by naming it in
/// `use_mcp_servers`).
#[utoipa::path(post, path = "/v1/mcp-servers", tag = "mcp-servers",
    request_body = McpServerConfig,
    responses((status = 201, body = RegisteredMcpServer),
              (status = 400, body = ErrorBody), (status = 401, body = ErrorBody),
              (status = 403, description = "FORBIDDEN_SCOPE: needs `tenant:admin`", body = ErrorBody),
              (status = 409, description = "CONFLICT: a server of that name is registered", body = ErrorBody),
              (status = 413, body = ErrorBody), (status = 415, body = ErrorBody),
              (status = 422, description = "INVALID_REQUEST: `details.field` names the offending field", body = ErrorBody),
              (status = 429, description = "TENANT_LIMIT: `mcp_servers` registered servers", body = ErrorBody),
              (status = 503, body = ErrorBody)),
    security(("bearer" = [])))]
pub async fn create_server(
    State(state): State<AppState>,
    principal: Principal,
    AppJson(body): AppJson<Value>,
) -> ApiResult<Response> {
    principal.require(scopes::TENANT_ADMIN)?;
    let entry = parse_entry(body)?;
    check_entry(&state, &entry)?;
    let record = state
        .store
        .create_mcp_server(
            &principal.tenant,
            &entry.name,
            &stored(&entry)?,
            state.settings.limits.mcp_servers,
        )
        .await?;
    tracing::info!(server = %entry.name, transport = ?entry.transport, "MCP server registered");
    Ok((StatusCode::CREATED, Json(registry::shown(&record)?)).into_response())
}

/// The tenant's registered MCP servers, by name.
#[utoipa::path(get, path = "/v1/mcp-servers", tag = "mcp-servers",
    responses((status = 200, body = RegisteredMcpServers), (status = 401, body = ErrorBody),
              (status = 403, body = ErrorBody), (status = 503, body = ErrorBody)),
    security(("bearer" = [])))]
pub async fn list_servers(
    State(state): State<AppState>,
    principal: Principal,
) -> ApiResult<Json<RegisteredMcpServers>> {
    require_read(&principal)?;
    let records = state
        .store
        .list_mcp_servers(&principal.tenant, state.settings.limits.mcp_servers.max(1))
        .await?;
    let servers = records
        .iter()
        .map(registry::shown)
        .collect::<Result<_, _>>()?;
    Ok(Json(RegisteredMcpServers { servers }))
}

/// One registered MCP server. Another tenant's server answers 404 like a missing one.
#[utoipa::path(get, path = "/v1/mcp-servers/{name}", tag = "mcp-servers",
    params(("name" = String, Path, description = "Server name")),
    responses((status = 200, body = RegisteredMcpServer), (status = 401, body = ErrorBody),
              (status = 403, body = ErrorBody), (status = 404, body = ErrorBody),
              (status = 503, body = ErrorBody)),
    security(("bearer" = [])))]
pub async fn get_server(
    State(state): State<AppState>,
    principal: Principal,
    Path(name): Path<String>,
) -> ApiResult<Json<RegisteredMcpServer>> {
    require_read(&principal)?;
    let record = state
        .store
        .get_mcp_server(&principal.tenant, &name)
        .await?
        .ok_or_else(|| ApiError::not_found("MCP server"))?;
    Ok(Json(registry::shown(&record)?))
}

/// Replaces a registered server's entry (its `name` must be the path's). A secret sent back
/// as `<redacted>` keeps its stored value. Sessions created before keep their copy.
#[utoipa::path(put, path = "/v1/mcp-servers/{name}", tag = "mcp-servers",
    params(("name" = String, Path, description = "Server name")),
    request_body = McpServerConfig,
    responses((status = 200, body = RegisteredMcpServer),
              (status = 400, body = ErrorBody), (status = 401, body = ErrorBody),
              (status = 403, description = "FORBIDDEN_SCOPE: needs `tenant:admin`", body = ErrorBody),
              (status = 404, body = ErrorBody),
              (status = 413, body = ErrorBody), (status = 415, body = ErrorBody),
              (status = 422, description = "INVALID_REQUEST: `details.field` names the offending field", body = ErrorBody),
              (status = 503, body = ErrorBody)),
    security(("bearer" = [])))]
pub async fn replace_server(
    State(state): State<AppState>,
    principal: Principal,
    Path(name): Path<String>,
    AppJson(body): AppJson<Value>,
) -> ApiResult<Json<RegisteredMcpServer>> {
    principal.require(scopes::TENANT_ADMIN)?;
    let entry = parse_entry(body)?;
    if entry.name != name {
        return Err(invalid(
            "name",
            "must be the name in the path (delete and create to rename)",
        ));
    }
    let current = state
        .store
        .get_mcp_server(&principal.tenant, &name)
        .await?
        .ok_or_else(|| ApiError::not_found("MCP server"))?;
    let entry = entry
        .keep_secrets_of(&registry::entry(&current)?)
        .map_err(|field| {
            invalid(
                &field,
                "`<redacted>` but no value is stored: send the value",
            )
        })?;
    check_entry(&state, &entry)?;
    let record = state
        .store
        .replace_mcp_server(&principal.tenant, &name, &stored(&entry)?)
        .await?
        .ok_or_else(|| ApiError::not_found("MCP server"))?;
    tracing::info!(server = %name, "MCP server replaced");
    Ok(Json(registry::shown(&record)?))
}

/// Deletes a registered server. Sessions created before keep their copy.
#[utoipa::path(delete, path = "/v1/mcp-servers/{name}", tag = "mcp-servers",
    params(("name" = String, Path, description = "Server name")),
    responses((status = 204, description = "Deleted"), (status = 401, body = ErrorBody),
              (status = 403, description = "FORBIDDEN_SCOPE: needs `tenant:admin`", body = ErrorBody),
              (status = 404, body = ErrorBody), (status = 503, body = ErrorBody)),
    security(("bearer" = [])))]
pub async fn delete_server(
    State(state): State<AppState>,
    principal: Principal,
    Path(name): Path<String>,
) -> ApiResult<StatusCode> {
    principal.require(scopes::TENANT_ADMIN)?;
    if !state
        .store
        .delete_mcp_server(&principal.tenant, &name)
        .await?
    {
        return Err(ApiError::not_found("MCP server"));
    }
    tracing::info!(server = %name, "MCP server deleted");
    Ok(StatusCode::NO_CONTENT)
}
